"""The kit's shared base: configuration, connection, lifecycle and wiring.

:class:`KitBase` holds what every operation of :class:`~migronaut_core.kit.Migronaut`
needs: the config, the client (connected lazily, owned or borrowed), the
private runner (``_runner``), the background engine's
:class:`~migronaut_core.background.runtime.Runtime`
(with the file cache of :mod:`~migronaut_core.background.loading` and the
runner hooks of :mod:`~migronaut_core.background.registration`), and the
once-per-connection index check; the wiring is private (``_runtime``). The
namespaces (``kit.runs``, ``kit.background``, ``kit.drift``) each hold the kit
and read these attributes typed; none of them connects or wires anything itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from migronaut_core import files
from migronaut_core.background.events import Events
from migronaut_core.background.loading import BackgroundFiles
from migronaut_core.background.registration import RunnerHooks, unblock_dependents
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.store import BackgroundStore, StateDocument, WatchStore
from migronaut_core.background.telemetry import MetricsSink, Telemetry
from migronaut_core.config import Config, load_config
from migronaut_core.errors import ConfigInvalidError, ConnectionFailedError, NotAppliedError
from migronaut_core.required_indexes import ensure_indexes
from migronaut_core.runner import MigrationRunner
from migronaut_core.scrub import redact_uri

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider


class KitBase:
    """The state every kit operation shares; see :class:`~migronaut_core.kit.Migronaut`."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        client: MongoClient[dict[str, Any]] | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        metrics_sink: MetricsSink | None = None,
        **overrides: Any,
    ) -> None:
        if config is not None and overrides:
            raise ConfigInvalidError(
                "pass either a Config or config keys, not both", {"key": next(iter(overrides))}
            )
        self.config = config if config is not None else load_config(overrides)
        self._client = client
        self._owns_client = client is None
        self.events = Events()
        self._telemetry = Telemetry(tracer_provider, meter_provider, sink=metrics_sink)
        self._runner_built: MigrationRunner | None = None
        self._runtime_built: Runtime | None = None
        self._files = BackgroundFiles(self.config, warn_once=self._warn_once)
        self._indexed = False

    # -- connection ----------------------------------------------------------------------

    @property
    def client(self) -> MongoClient[dict[str, Any]]:
        if self._client is None:
            self._client = self._connect()
        return self._client

    @property
    def db(self) -> Database[dict[str, Any]]:
        return self.client[self.config.database_name()]

    def _connect(self) -> MongoClient[dict[str, Any]]:
        self.config.database_name()  # a missing database fails before connecting
        try:
            client: MongoClient[dict[str, Any]] = MongoClient(
                self.config.uri,
                serverSelectionTimeoutMS=self.config.server_selection_timeout_ms,
                appname="migronaut",
                tz_aware=True,
            )
            client.admin.command("ping")
        except ConfigurationError as exc:
            raise ConfigInvalidError(
                f"uri is not usable: {type(exc).__name__}", {"key": "uri"}
            ) from exc
        except PyMongoError as exc:
            raise ConnectionFailedError(
                f"cannot reach MongoDB at {redact_uri(self.config.uri)} "
                f"({type(exc).__name__}); is the server running?",
                {"uri": redact_uri(self.config.uri)},
            ) from exc
        return client

    def close(self) -> None:
        """Close the client if this kit created it; the kit can connect again later."""
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None
        self._runner_built = None
        self._runtime_built = None
        self._files = BackgroundFiles(self.config, warn_once=self._warn_once)
        self._indexed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- wiring --------------------------------------------------------------------------

    def connect(self) -> None:
        """Connect and wire the engine now rather than on first use.

        For a kit that threads will share (a web server's request threads): the
        wiring is then built once, before any of them uses it.
        """
        self._runtime  # noqa: B018 - built here, once

    @property
    def _runner(self) -> MigrationRunner:
        """The runner over this kit's database (built on first use); internal."""
        if self._runner_built is None:
            hooks = RunnerHooks(self._runtime, self._files, self.config, ready=self._ready)
            self._runner_built = MigrationRunner(
                self.config, self.client, self.db, background=hooks
            )
        return self._runner_built

    @property
    def _runtime(self) -> Runtime:
        """The background engine's wiring over this kit's database (built on first use);
        internal."""
        if self._runtime_built is None:
            self._runtime_built = self._wire()
        return self._runtime_built

    def _wire(self) -> Runtime:
        def on_completed(name: str) -> None:
            unblock_dependents(runtime, name)

        def adopted_of(names: Sequence[str]) -> set[str]:
            return self._runner.changelog.adopted_names(names)

        runtime = Runtime(
            db=self.db,
            client=self.client,
            store=BackgroundStore(self.db, self.config.background_collections),
            events=self.events,
            load=self._files.load,
            lock_collection=self.config.lock_collection,
            ttl_seconds=self.config.lock_ttl_seconds,
            on_completed=on_completed,
            adopted_of=adopted_of,
            shard_aware=self.config.background_shard_aware,
            windows=self.config.background_windows or (),
            telemetry=self._telemetry,
            bookkeeping=self.config.bookkeeping_collections,
            budget_rate=self.config.background_budget,
        )
        return runtime

    def _ready(self) -> None:
        """Create migronaut's indexes before the first write (once per connection).

        With ``ensure_indexes = false`` only check them: every missing one is
        named (:class:`IndexMissingError`) before anything is written.
        """
        if not self._indexed:
            required = [
                *self._runner.changelog.required_indexes(),
                *self._runtime.store.required_indexes(),
            ]
            ensure_indexes(self.db, required, create=self.config.ensure_indexes)
            self._indexed = True

    def _checked_first(self) -> None:
        """With ``ensure_indexes = false``, check every index before a run takes its lock."""
        if not self.config.ensure_indexes:
            self._ready()

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        self._runtime.warn_once(key, message, *args)

    def _registered(self, name: str) -> StateDocument:
        """The state of a registered background migration; reads only.

        :raises NotAppliedError: it is not registered.
        """
        files.validate_name(name)
        state = self._runtime.store.states.get(name)
        if state is None:
            raise NotAppliedError(
                f"background migration {name} is not registered; run `migronaut up` first",
                {"migration": name},
            )
        return state

    def _watch_store(self) -> WatchStore:
        return WatchStore(self._runtime.db, self.config.background_collections.watch)
