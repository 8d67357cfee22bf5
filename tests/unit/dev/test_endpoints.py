"""The Airflow connection of a MongoDB URI, as the demo, the tests and the benchmarks build it."""

from __future__ import annotations

import json

import pytest

from migronaut_dev.endpoints import airflow_connection, free_port


def test_every_host_the_credentials_and_the_options_are_kept() -> None:
    uri = "mongodb://ana:p%40ss@127.0.0.1:27017,127.0.0.1:27018/?replicaSet=rs&w=majority"
    assert json.loads(airflow_connection(uri, "shop")) == {
        "conn_type": "mongo",
        "host": "127.0.0.1:27017,127.0.0.1:27018",
        "schema": "shop",
        "login": "ana",
        "password": "p@ss",
        "extra": {"replicaSet": "rs", "w": "majority"},
    }


def test_srv_becomes_an_extra_and_other_schemes_are_refused() -> None:
    srv = json.loads(airflow_connection("mongodb+srv://cluster.example.net/", "shop"))
    assert (srv["host"], srv["extra"], "login" in srv) == (
        "cluster.example.net",
        {"srv": True},
        False,
    )
    with pytest.raises(ValueError, match="not a MongoDB URI"):
        airflow_connection("postgres://db/", "shop")


def test_a_free_port_avoids_the_excluded_ones() -> None:
    taken = {free_port()}
    assert free_port(taken) not in taken
