"""Helpers the tests share; no test module imports another test module.

Modules here hold data builders (:mod:`.background`, :mod:`.runner`, :mod:`.lanes`,
:mod:`.steps`, :mod:`.watching`, :mod:`.shard_shapes`, :mod:`.spec`,
:mod:`.throttle`, :mod:`.bson_values`), drivers (:mod:`.cli`,
:mod:`.dags`, :mod:`.browser`, :mod:`.airflow`, :mod:`.servers`, :mod:`.app_writer`,
:mod:`.chaos`, :mod:`.network_faults`, :mod:`.telemetry`, :mod:`.cluster`: the Celery
cluster and its scenarios), test bodies any Airflow driver can run
(:mod:`.drift_events`) and the entry points tests
start as child processes with ``python -m tests.support.<name>``
(:mod:`.lane_process`, :mod:`.chaos_lane`, :mod:`.claimer_process`,
:mod:`.watch_process`, :mod:`.registration_kill`). Importing this package imports
nothing else.
"""
