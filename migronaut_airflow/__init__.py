"""migronaut's Apache Airflow provider: background migrations as DAGs.

Registered through the ``apache_airflow_provider`` entry point
(:func:`get_provider_info`). Nothing here touches MongoDB at import or DAG-parse
time.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def get_provider_info() -> dict[str, Any]:
    """What Airflow's provider manager reads about this package."""
    return {
        "package-name": "migronaut-airflow",
        "name": "migronaut",
        "description": "Online, resumable MongoDB schema migrations as Airflow DAGs.",
        "versions": [__version__],
        "hooks": [
            {
                "integration-name": "migronaut",
                "python-modules": ["migronaut_airflow.hooks.migronaut"],
            }
        ],
        "operators": [
            {
                "integration-name": "migronaut",
                "python-modules": ["migronaut_airflow.operators.background"],
            }
        ],
        "sensors": [
            {
                "integration-name": "migronaut",
                "python-modules": ["migronaut_airflow.sensors.lanes"],
            }
        ],
        "triggers": [
            {
                "integration-name": "migronaut",
                "python-modules": [
                    "migronaut_airflow.triggers.lanes",
                    "migronaut_airflow.triggers.delay",
                ],
            }
        ],
        "plugins": [
            {
                "name": "migronaut",
                "plugin-class": "migronaut_airflow.plugins.plugin.MigronautPlugin",
            }
        ],
        "integrations": [
            {
                "integration-name": "migronaut",
                "external-doc-url": "https://pypi.org/project/migronaut-airflow/",
                "tags": ["software"],
            }
        ],
    }
