"""How the generated DAGs look to Airflow: ordinary DAG and task arguments, checked once.

A platform team gives migronaut's DAGs what it gives every DAG: an owner,
callbacks and notifiers in ``default_args``, tags, DAG-level arguments
(``max_active_tasks``, ``dagrun_timeout``, …), and per kind of task the queue,
pool and executor settings of the workers that should run it. What migronaut
itself decides (ids, schedules, run limits, retries that keep a round safe)
cannot be overridden here; asking to is an error naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from migronaut_core import ConfigInvalidError

#: The kinds of task a caller may give queue, pool and executor settings to.
TaskKind = Literal["coordinator", "lane", "sensor", "admin"]
TASK_KINDS: Final = get_args(TaskKind)
#: What ``task_args`` may set per kind.
TASK_ARG_KEYS: Final = frozenset(
    {"queue", "pool", "pool_slots", "executor_config", "execution_timeout", "owner"}
)
#: DAG arguments migronaut decides; ``dag_args`` may not set them.
RESERVED_DAG_ARGS: Final = frozenset(
    {
        "dag_id",
        "schedule",
        "catchup",
        "max_active_runs",
        "default_args",
        "tags",
        "params",
        "is_paused_upon_creation",
    }
)


@dataclass(frozen=True)
class DagOptions:
    """Arguments for every DAG of a target (``build_dags``' keywords of the same names).

    :param default_args: the DAGs' ``default_args`` (owner, ``on_failure_callback``,
        notifiers, ``email``…), over migronaut's own. A task's explicit arguments
        still win: the coordinator, sensor and lane retries stay as migronaut sets them.
    :param tags: added to ``migronaut`` (and ``migronaut:<target>``).
    :param dag_args: further ``DAG`` arguments for every DAG.
    :param background_dag_args: further arguments for the migration DAGs only, over
        ``dag_args`` (``max_active_tasks`` to run more lanes at once, ``dagrun_timeout``).
    :param task_args: per task kind (``coordinator``: ``coordinate`` and ``continue``;
        ``lane``; ``sensor``: ``wait_for_lanes``; ``admin``: up, control, verify, heal
        and their triggers) a ``queue``, ``pool``, ``pool_slots``,
        ``executor_config``, ``execution_timeout`` or ``owner``.
    :param paused_upon_creation: whether new DAGs start paused. Migronaut's DAGs run
        only when triggered (by ``migronaut_up``, the heal, a control) or on their own
        assets, so they start unpaused; None leaves it to Airflow's
        ``dags_are_paused_at_creation``.
    """

    default_args: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    dag_args: Mapping[str, Any] = field(default_factory=dict)
    background_dag_args: Mapping[str, Any] = field(default_factory=dict)
    task_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    paused_upon_creation: bool | None = False

    def __post_init__(self) -> None:
        for key in ("dag_args", "background_dag_args"):
            reserved = sorted(RESERVED_DAG_ARGS & set(getattr(self, key)))
            if reserved:
                raise ConfigInvalidError(
                    f"{key} may not set {reserved[0]!r}: migronaut decides it",
                    {"key": f"{key}.{reserved[0]}"},
                )
        for kind, arguments in self.task_args.items():
            if kind not in TASK_KINDS:
                raise ConfigInvalidError(
                    f"task_args has no task kind {kind!r} (kinds: {', '.join(TASK_KINDS)})",
                    {"key": f"task_args.{kind}"},
                )
            unknown = sorted(set(arguments) - TASK_ARG_KEYS)
            if unknown:
                raise ConfigInvalidError(
                    f"task_args[{kind!r}] may not set {unknown[0]!r} "
                    f"(allowed: {', '.join(sorted(TASK_ARG_KEYS))})",
                    {"key": f"task_args.{kind}.{unknown[0]}"},
                )

    def for_tasks(self, kind: TaskKind) -> dict[str, Any]:
        """The arguments every task of ``kind`` gets."""
        return dict(self.task_args.get(kind, {}))

    def for_dag(self, *, background: bool) -> dict[str, Any]:
        """The extra ``DAG`` arguments of a migration DAG or of another one."""
        extra = dict(self.dag_args)
        if background:
            extra.update(self.background_dag_args)
        return extra


@dataclass(frozen=True)
class DriftEventOptions:
    """How the event-driven drift healing is built (``build_dags(drift_events=…)``).

    :param host: the MongoDB host the assets' URIs name (default: the target's
        ``asset_host``, else the connection's first host); ``port`` likewise.
    :param refire_after_seconds: how long a fired event has to reopen its
        migration before old-shape documents still there fire again.
    :param refresh_seconds: how often the triggers read the migrations again.
    :param on_drift: ``reopen`` or ``report``; default ``background_on_drift``.
    """

    host: str | None = None
    port: int | None = None
    refire_after_seconds: float = 300.0
    refresh_seconds: float = 10.0
    on_drift: str | None = None


def drift_event_options(
    value: DriftEventOptions | Mapping[str, Any] | bool,
) -> DriftEventOptions | None:
    """``build_dags``' ``drift_events`` as options; None: build no assets and no DAG."""
    if value is True:
        return DriftEventOptions()
    if value is False:
        return None
    if isinstance(value, DriftEventOptions):
        return value
    return DriftEventOptions(**value)
