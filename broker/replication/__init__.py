"""Replication: every partition on several brokers, one leader, in-sync followers.

Sans-IO cores: :mod:`.state` (partition state, leader election, replica placement),
:mod:`.isr` (the leader's bookkeeping of followers, high watermark and ISR changes),
:mod:`.reconcile` (where a returning replica's log parts from the leader's),
:mod:`.roles` (a hosted replica and the role a state gives it) and :mod:`.acks`
(acks=all waits). IO layers: :mod:`.controller` (the elected controller, a thread on
ZooKeeper), :mod:`.manager` (a broker's replicas on its event loop: the hub, with
:mod:`.leader` for the leader's side, :mod:`.lease` for fencing and the write lease,
:mod:`.follower` for applying fetched bytes), :mod:`.fetcher` (the follower's fetch
loop) and :mod:`.checkpoint` (the high-watermark file). The broker process is reached
only through :mod:`.services`.
"""
