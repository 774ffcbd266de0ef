"""Who a client is and what it may do: SASL SCRAM (one sans-IO session for every front
end, users' credentials from ZooKeeper) and the ACL authorizer."""
