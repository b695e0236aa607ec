"""Every Berth hookspec (SPEC §3.1): platform-plugin hooks and bundle hooks.

Hook names start with ``berth_``. Platform plugins (entry-point group ``berth.plugins``) are registered
on the host's plugin manager at start-up; each returns ``{name: factory}`` for the backends it adds,
and two plugins that register the same name are refused at start-up, naming both packages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

PROJECT_NAME = "berth"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from berth.config.secrets import SecretProviderFactory


# -- platform plugin hooks ---------------------------------------------------------------------


@hookspec
def berth_secret_providers() -> Mapping[str, SecretProviderFactory]:
    """Contribute secret providers: ``{prefix: factory}``.

    A secret source ``<prefix>:<ref>`` in ``secrets.yaml`` or ``bundles.secrets.yaml`` is resolved by
    ``factory(options).resolve(ref)``, where ``options`` is ``platform.secret_providers.<prefix>`` of
    ``assembly.yaml``. ``env``, ``file`` and ``literal`` are built in and cannot be replaced.

    :return: a mapping of provider prefix to factory.

    Called once at host start-up, and by ``berth descriptors check`` to know the valid prefixes.
    Not firstresult: every plugin's mapping is collected.
    """
    raise NotImplementedError


@hookspec
def berth_storage_backends() -> Mapping[str, Callable[..., Any]]:
    """Contribute storage backends (conversation store, artifact store, bus): ``{kind: factory}``.

    :return: a mapping of backend name to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_model_providers() -> Mapping[str, Callable[..., Any]]:
    """Contribute model providers (``anthropic``, ``openai-compatible``, ``scripted``): ``{name: factory}``.

    :return: a mapping of provider name (as used in ``models.*.provider``) to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_exec_backends() -> Mapping[str, Callable[..., Any]]:
    """Contribute isolated-execution backends (``local``, ``docker``, ``fargate``): ``{name: factory}``.

    :return: a mapping of backend name (as used in exec profiles) to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_tool_packs() -> Mapping[str, Callable[..., Any]]:
    """Contribute tool packs that bundles enable by id (``web``, ``exec``): ``{pack_id: factory}``.

    :return: a mapping of pack id to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_embedders() -> Mapping[str, Callable[..., Any]]:
    """Contribute embedders for memory search: ``{name: factory}``.

    :return: a mapping of embedder name (``platform.embedder.provider``) to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError
