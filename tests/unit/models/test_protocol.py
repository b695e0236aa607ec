"""The seam's types, the api-key lookup, and the three providers registered as platform plugins."""

from __future__ import annotations

import subprocess
import sys

import pytest
from anthropic.resources.messages import DEPRECATED_MODELS
from conversations import Conversation

from berth.config.models.assembly import ModelRef
from berth.config.models.common import SecretSetting
from berth.config.secrets import Secret
from berth.default_plugins.models import anthropic, anthropic_plugin, openai_compatible, scripted
from berth.host.plugins import PlatformPlugins
from berth.models import DEFAULT_MAX_OUTPUT_TOKENS, ModelRequest, Usage, resolve_api_key


def test_usage_adds_up_and_counts_every_input_token() -> None:
    first = Usage(input_tokens=10, output_tokens=5, cache_read_input_tokens=100, cache_creation_input_tokens=20)
    total = first.plus(Usage(input_tokens=1, output_tokens=1, cache_read_input_tokens=130))
    assert total == Usage(input_tokens=11, output_tokens=6, cache_read_input_tokens=230, cache_creation_input_tokens=20)
    assert first.total_input_tokens == 130


def test_the_output_limit_falls_back_from_request_to_model_to_default(conversation: Conversation) -> None:
    prompt = conversation.turn("turn_1").render()
    ref = ModelRef(model="m", max_output_tokens=2048)
    assert ModelRequest(prompt=prompt, max_output_tokens=100).output_limit(ref) == 100
    assert ModelRequest(prompt=prompt).output_limit(ref) == 2048
    assert ModelRequest(prompt=prompt).output_limit(ModelRef(model="m")) == DEFAULT_MAX_OUTPUT_TOKENS


def test_the_api_key_is_the_models_setting_else_the_providers_default_secret() -> None:
    asked: list[SecretSetting | str] = []

    def secrets(name: SecretSetting | str) -> Secret:
        asked.append(name)
        return Secret(str(name), "value-1234")

    resolve_api_key(ModelRef(model="m"), secrets, "anthropic_api_key")
    resolve_api_key(ModelRef(model="m", api_key="secret:team_key"), secrets, "anthropic_api_key")  # type: ignore[arg-type]
    assert asked == ["anthropic_api_key", SecretSetting("secret:team_key")]


def test_the_three_providers_register_through_the_plugin_hook() -> None:
    plugins = PlatformPlugins()
    registered = [(anthropic_plugin, "anthropic"), (openai_compatible, "openai-compatible"), (scripted, "scripted")]
    for module, name in registered:
        plugins.register(module, name=name, package="berth-platform")
    providers = plugins.model_providers()
    assert sorted(providers) == ["anthropic", "openai-compatible", "scripted"]
    # the plugin registers a factory that imports the SDK's provider module on first use
    provider = providers["anthropic"](ModelRef(model="claude-x", api_key="sk-test"), lambda setting: Secret("k", "sk"))
    assert isinstance(provider, anthropic.AnthropicProvider)


def test_registering_the_anthropic_plugin_does_not_import_the_sdk() -> None:
    probe = "import sys, berth.default_plugins.models.anthropic_plugin; print('anthropic' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "False"


def test_a_request_is_a_frozen_record(conversation: Conversation) -> None:
    request = ModelRequest(prompt=conversation.turn("turn_1").render(), stop_sequences=("</channel:action>",))
    with pytest.raises(ValueError, match="frozen"):
        request.max_output_tokens = 5  # type: ignore[misc]


def test_deprecated_anthropic_models_are_named_with_their_end_of_life() -> None:
    # the SDK's own table changes between releases (retired models leave it): take one it lists now
    deprecated, end_of_life = next(iter(DEPRECATED_MODELS.items()))
    assert anthropic.model_deprecation(deprecated) == end_of_life
    assert anthropic.model_deprecation("claude-sonnet-5-5") is None
