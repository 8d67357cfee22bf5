"""Build hooks of ``migronaut-airflow``: the package, and ``migronaut-core`` pinned.

:class:`IncludePackage` brings ``migronaut_airflow`` (with its plugin's static files
and templates) from the repository's top level, two folders up, as
``distributions/core/hatch_build.py`` does for the core; an unpacked sdist holds it
beside this file. :class:`PinCore` makes the first dependency ``migronaut-core`` of
exactly this version, which both distributions read from ``migronaut_core``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.metadata.plugin.interface import MetadataHookInterface

PACKAGE = "migronaut_airflow"


class IncludePackage(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        in_tree = Path(self.root).parent.parent / PACKAGE
        if in_tree.is_dir():
            build_data["force_include"][str(in_tree)] = PACKAGE


class PinCore(MetadataHookInterface):
    def update(self, metadata: dict[str, Any]) -> None:
        pinned = f"migronaut-core=={metadata['version']}"
        metadata["dependencies"] = [pinned, *self.config.get("dependencies", [])]
