"""A broker registration's listeners as people see them (broker.coordination.zk.registered_endpoints)."""

from broker.coordination.zk import registered_endpoints


def test_endpoints_are_read_as_registered():
    data = {
        "host": "h",
        "port": 1,
        "listeners": {"local": ["h", 1]},
        "endpoints": [
            {"name": "local", "protocol": "logferry", "host": "h", "port": 1, "security": "plaintext"},
            {"name": "kafka", "protocol": "kafka", "host": "h", "port": 9092, "security": "TLS, SASL required"},
            {"name": "broken"},
        ],
    }  # skipped, not fatal
    assert registered_endpoints(data) == [
        ("local", "logferry", "h", 1, "plaintext"),
        ("kafka", "kafka", "h", 9092, "TLS, SASL required"),
    ]


def test_an_older_registration_gives_what_it_has_with_security_unknown():
    assert registered_endpoints({"host": "h", "port": 1, "kafka": ["h", 9092]}) == [
        ("default", "logferry", "h", 1, ""),
        ("kafka", "kafka", "h", 9092, ""),
    ]
    assert registered_endpoints({"host": "h", "port": 1, "listeners": {"a": ["h", 2]}}) == [
        ("a", "logferry", "h", 2, "")
    ]
    assert registered_endpoints({"host": "h", "port": 1, "kafka": ["", 0]}) == [("default", "logferry", "h", 1, "")]
