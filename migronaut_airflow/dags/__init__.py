"""DAG factories: one DAG per background migration plus the up, control and drift DAGs.

:func:`~.factory.build_dags` turns a migrations directory into DAGs; it only
converts arguments and wires tasks — every decision is the core's.
"""
