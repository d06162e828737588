"""Which hosts of a DSN the collector's connections go to (collector/store/route.py)."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from gpuscope.collector.store.route import Route, one_host

DSN = "postgresql://g:pw@db1:5001,db2:5002,db3:5003/gpuscope?target_session_attrs=read-write&connect_timeout=3"


def test_fenced_hosts_are_left_out_and_come_back_one_by_one() -> None:
    route = Route(DSN)
    assert route.dsn() == DSN
    route.fence("db1", "5001")
    route.fence("db3", "5003")
    kept = conninfo_to_dict(route.dsn())
    assert (kept["host"], kept["port"], kept["target_session_attrs"]) == ("db2", "5002", "read-write")
    assert (kept["password"], kept["connect_timeout"]) == ("pw", "3")
    route.unfence("db1", "5001")
    assert conninfo_to_dict(route.dsn())["host"] == "db1,db2"
    assert route.others("db2", "5002") == [("db1", "5001")]


def test_a_host_asked_alone_has_no_target() -> None:
    alone = conninfo_to_dict(one_host(DSN, "db2", "5002"))
    assert (alone["host"], alone["port"], alone.get("target_session_attrs")) == ("db2", "5002", None)


def test_hosts_it_cannot_tell_apart_are_never_fenced() -> None:
    assert Route("host=/var/run/postgresql dbname=g").others("/var/run/postgresql", "5432") == []
    assert Route("hostaddr=10.0.0.1,10.0.0.2 host=a,b dbname=g").others("a", "5432") == []
    assert Route("postgresql://g@db1/gpuscope").others("db1", "5432") == []  # one host: nowhere else
