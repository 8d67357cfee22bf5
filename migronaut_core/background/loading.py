"""Background migration files as the engine runs them: loaded, resolved, cached.

:class:`BackgroundFiles` finds a background migration's file, resolves its spec
against the versioning its collection declares (``collections`` /
``collections_dir``) and keeps the result until the file's checksum changes.
One per kit; safe to share across threads. Its :meth:`~BackgroundFiles.load` is
the :class:`~migronaut_core.background.runtime.Loader` of the kit's runtime.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from migronaut_core import files
from migronaut_core.background.runtime import LoadedBackground
from migronaut_core.background.spec import resolve_spec
from migronaut_core.background.warn_once import Warn
from migronaut_core.config import Config
from migronaut_core.definitions import CollectionDefinition, Versioning, load_definitions
from migronaut_core.errors import ConfigInvalidError, MigrationInvalidExportError
from migronaut_core.files import LoadedMigration


class BackgroundFiles:
    """The background migration files of one kit's ``migrations_dir``.

    :param warn_once: where a tolerant load says that the definitions do not load
        (the runtime's warn-once, so it is said once per process).
    """

    def __init__(self, config: Config, *, warn_once: Warn) -> None:
        self.config = config
        self._warn_once = warn_once
        self._cache: dict[str, LoadedBackground] = {}
        self._cache_lock = threading.Lock()
        self._definitions: dict[str, CollectionDefinition] | None = None

    def load(self, name: str, *, tolerant: bool = False) -> LoadedBackground:
        """A background migration file, resolved and validated; cached by checksum.

        :param tolerant: for a registered migration (whose stored spec stands):
            collection definitions that do not load are warned about and passed over.
        """
        file = files.find(self.config.migrations_dir, name)
        checksum = file.checksum()
        with self._cache_lock:
            hit = self._cache.get(name)
        if hit is not None and hit.checksum == checksum:
            return hit
        loaded, complete = self._resolve(files.load(file), tolerant=tolerant)
        if complete:  # never remember a file resolved without its definitions
            with self._cache_lock:
                self._cache[name] = loaded
        return loaded

    def resolve(self, migration: LoadedMigration, *, tolerant: bool = False) -> LoadedBackground:
        """Resolve a background migration file against its collection's declared versioning.

        :param tolerant: as for :meth:`load` (a registered migration's functions).
        :raises ConfigInvalidError: the spec is invalid, contradicts the declared
            versioning, or (not ``tolerant``) the definitions do not load.
        """
        return self._resolve(migration, tolerant=tolerant)[0]

    def _resolve(
        self, migration: LoadedMigration, *, tolerant: bool
    ) -> tuple[LoadedBackground, bool]:
        """The resolved file, and whether its definitions were read (else it goes without)."""
        try:
            declared = self._declared(migration)
        except ConfigInvalidError as exc:
            if not tolerant:
                raise
            self._warn_once(
                f"definitions:{migration.name}",
                "the collection definitions do not load (%s); %s goes by the spec it was "
                "registered with",
                exc.message,
                migration.name,
            )
            return self._resolved(migration, None), False
        return self._resolved(migration, declared), True

    # -- collection definitions -----------------------------------------------------------

    def definitions(self) -> list[CollectionDefinition]:
        """The declared collections (read once).

        :raises ConfigInvalidError: a definition or definition file is malformed.
        """
        return list(self._by_name().values())

    def versioning_of(self, collection: str) -> Versioning | None:
        """A declared collection's versioning, or ``None``.

        :raises ConfigInvalidError: the definitions do not load.
        """
        if self.config.collections is None and self.config.collections_dir is None:
            return None
        definition = self._by_name().get(collection)
        return None if definition is None else definition.versioning

    def _by_name(self) -> dict[str, CollectionDefinition]:
        if self._definitions is None:
            found = load_definitions(
                self.config.collections,
                self.config.collections_dir,
                reserved=self.config.bookkeeping_collections,
            )
            self._definitions = {definition.name: definition for definition in found}
        return self._definitions

    # -- resolving ------------------------------------------------------------------------

    def _resolved(
        self, migration: LoadedMigration, declared: Versioning | None
    ) -> LoadedBackground:
        if migration.kind != "background":
            raise MigrationInvalidExportError(
                f"{migration.name} is not a background migration", {"name": migration.name}
            )
        spec, fns = resolve_spec(
            migration.name,
            migration.module,
            versioning=None if declared is None else declared.to_dict(),
            target_health=self.config.background_health,
        )
        if spec.collection in self.config.bookkeeping_collections:
            raise MigrationInvalidExportError(
                f"background migration {migration.name} targets one of migronaut's own collections",
                {"name": migration.name},
            )
        return LoadedBackground(
            name=migration.name,
            spec=spec,
            fns=fns,
            checksum=migration.checksum,
            requires=migration.requires,
            description=migration.description,
        )

    def _declared(self, migration: LoadedMigration) -> Versioning | None:
        """The declared versioning of the collection a background file names, if any."""
        raw: Any = getattr(migration.module, "background", None)
        collection = raw.get("collection") if isinstance(raw, Mapping) else None
        if not isinstance(collection, str) or collection in self.config.bookkeeping_collections:
            return None
        return self.versioning_of(collection)
