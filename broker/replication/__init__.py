"""Replication: every partition on several brokers, one leader, in-sync followers.

Sans-IO cores: :mod:`.state` (partition state, leader election, replica placement),
:mod:`.isr` (the leader's bookkeeping of followers, high watermark and ISR changes),
:mod:`.reconcile` (where a returning replica's log parts from the leader's). IO
layers: :mod:`.controller` (the elected controller, a thread on ZooKeeper),
:mod:`.manager` (a broker's replicas on its event loop) and :mod:`.fetcher` (the
follower's fetch loop).
"""
