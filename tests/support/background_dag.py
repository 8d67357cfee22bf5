"""The split-names migration's generated DAG, run round after round with ``dag.test()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, write_background
from tests.support.dags import load_dags, task_states, xcom

#: At 2 ms a document, three lanes' 300 ms slices (one batch of 25 over each at most)
#: migrate at most 525 documents a round, however fast the machine: a pass of this many
#: outlasts its first round, so a round ends with open partitions and no live lease.
#: The sleep, not the machine, sets most of a slice's pace, so two rounds usually do
#: (each round's task starts cost seconds on Airflow 3.2: rounds are what cost time).
DOCUMENTS = 600


def write_migration(folder: Path) -> None:
    """The split-names migration these DAG runs drive (see :data:`DOCUMENTS`), in
    partitions of 100 documents or more: six, so each lane of a round has one to claim."""
    write_background(
        folder,
        batch_size=25,
        max_parallel=3,
        per_document_seconds=0.002,
        extra='"partitions": {"min_partition_docs": 100},',
    )


def run_until_completed(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path, **config: Any
) -> tuple[dict[str, Any], list[Any]]:
    """Run the migration's DAG round after round; its final status and the sensor's reasons."""
    dag = load_dags()[dag_id_for(SPLIT_NAME)]
    reasons = []
    for round_number in range(40):
        run = dag.test()
        states = task_states(run)
        reasons.append(xcom(run, "wait_for_lanes"))
        with make_kit(mongo_uri, db, migrations, **config) as kit:
            status = kit_json.status(kit, SPLIT_NAME)
        if status["status"] == "completed":
            assert states[("announce_completed", -1)] == "success", states
            break
        assert run.state == "success", states
        assert states[("lane", 0)] == "success"
        assert states[("announce_completed", -1)] == "skipped"  # not completed yet
        lanes = {key[1] for key in states if key[0] == "lane"}
        # The first round maps one lane per slot; later ones, one per open partition.
        assert lanes == {0, 1, 2} if round_number == 0 else lanes <= {0, 1, 2}
    print("sensor reasons:", reasons)
    return status, reasons
