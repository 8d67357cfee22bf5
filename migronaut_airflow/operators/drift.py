"""The task a drift event starts: apply the on-drift policy to the collections that drifted.

``migronaut_drift_events`` runs when a
:class:`~migronaut_airflow.triggers.drift.CollectionDriftTrigger` fires on a
collection's asset. :class:`VerifyDriftEventsOperator` reads which collections
the triggering events name and asks the kit to verify them
(``kit.drift.verify``: reopen or report, as ``background_on_drift`` says);
the heal that follows starts the DAGs of the reopened migrations. A run
started by anything else (a lane's outlet event on the same asset) skips.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowSkipException

from migronaut_airflow.operators.background import VerifyDriftOperator, fail_fast
from migronaut_core import MigronautError

if TYPE_CHECKING:
    from airflow.sdk import Context


def drift_event_collections(events: Mapping[Any, Iterable[Any]]) -> list[str]:
    """The collections named by drift triggers' events among a run's triggering asset events.

    :param events: ``context["triggering_asset_events"]``: asset → its events,
        each with an ``extra`` (a trigger's event arrives as
        ``{"from_trigger": True, "payload": …}``).
    """
    found: set[str] = set()
    for asset_events in events.values():
        for event in asset_events:
            extra = getattr(event, "extra", None) or {}
            payload = extra.get("payload") if extra.get("from_trigger") else None
            if not isinstance(payload, Mapping) or payload.get("status") != "drift":
                continue
            collection = payload.get("collection")
            if isinstance(collection, str) and collection:
                found.add(collection)
    return sorted(found)


class VerifyDriftEventsOperator(VerifyDriftOperator):
    """Verify the collections this run's drift events name; reopen or report.

    Skips (and with it the heal) when no drift trigger's event started the run.
    Returns the report of ``kit.drift.verify`` as JSON.
    """

    def execute(self, context: Context) -> dict[str, Any]:
        collections = drift_event_collections(context.get("triggering_asset_events") or {})
        if not collections:
            raise AirflowSkipException("no drift trigger's event started this run")
        self.log.info("drift events on %s", ", ".join(collections))
        try:
            report = self.kit.drift.verify(on_drift=self.on_drift, collections=collections)
        except MigronautError as exc:
            raise fail_fast(exc) from exc
        return report.to_dict()
