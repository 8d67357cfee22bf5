"""The Airflow UI for background migrations: a plugin with pages and a JSON API.

- :mod:`.plugin`: the ``AirflowPlugin`` (mounted at ``/migronaut``, navigation and per-DAG views);
- :mod:`.app`: the FastAPI app; :mod:`.api` its JSON routes, :mod:`.pages` its pages;
- :mod:`.access`: the signed-in user and its rights on a migration's DAG;
- :mod:`.target`: which MongoDB, one kit per process;
- :mod:`.readings`: what is read and shown; :mod:`.models`: its JSON shapes;
- :mod:`.actions`, :mod:`.runs`: the controls, and the DAG run they start;
- :mod:`.throughput`: docs/second sampled between reads; :mod:`.errors`: error answers.
"""
