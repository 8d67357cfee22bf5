"""migronaut's Apache Airflow provider: background migrations as DAGs.

Registered through the ``apache_airflow_provider`` entry point
(:func:`get_provider_info`). Nothing here touches MongoDB at import or DAG-parse
time.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:  # one version source: the distributions take it from migronaut_core.__version__
    __version__ = version("migronaut-airflow")
except PackageNotFoundError:  # a source tree on the path, not installed
    __version__ = "0+unknown"


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
                "python-modules": [
                    "migronaut_airflow.operators.approval",
                    "migronaut_airflow.operators.background",
                    "migronaut_airflow.operators.drift",
                    "migronaut_airflow.operators.runs",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "migronaut",
                "python-modules": [
                    "migronaut_airflow.sensors.lanes",
                    "migronaut_airflow.sensors.migration",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "migronaut",
                "python-modules": [
                    "migronaut_airflow.triggers.lanes",
                    "migronaut_airflow.triggers.delay",
                    "migronaut_airflow.triggers.drift",
                    "migronaut_airflow.triggers.stall",
                    "migronaut_airflow.triggers.gate",
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
