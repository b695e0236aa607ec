"""``assembly.yaml``: the platform (storage, models, react, exec, embedder) and its tenants/projects."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from berth.config.models.common import DescriptorModel, ScopeName, SecretSetting, partial_model


class EmbeddedStorage(DescriptorModel):
    """Single-process storage: SQLite and files under ``root``, an in-process bus."""

    kind: Literal["embedded"] = "embedded"
    root: str = Field("./var", description="folder for the SQLite database and artifacts")


class PostgresConfig(DescriptorModel):
    """PostgreSQL connection for conversations, turn logs and the memory index."""

    dsn: SecretSetting
    pool_min: int = Field(1, ge=0)
    pool_max: int = Field(10, ge=1)
    retry_budget_s: float = Field(
        60.0,
        gt=0,
        description="how long an operation whose connection drops, or cannot be opened (the server is down, failing"
        " over), goes on retrying with backoff before it fails: a running turn waits through a shorter outage",
    )


class RedisConfig(DescriptorModel):
    """Redis connection for the bus, SSE fan-out, turn queue and rate-limit counters."""

    url: SecretSetting


class S3Artifacts(DescriptorModel):
    """Artifacts in an S3 bucket."""

    kind: Literal["s3"]
    bucket: str = Field(min_length=3)
    prefix: str = ""
    region: str | None = None
    endpoint_url: str | None = Field(None, description="for S3-compatible stores")
    presigned_downloads: bool = Field(
        False, description="the files route redirects to a presigned URL instead of streaming the object"
    )
    presign_ttl_s: int = Field(300, ge=1, le=7 * 24 * 3600, description="how long a presigned URL is valid")
    multipart_threshold_mb: int = Field(8, ge=5, description="objects this large or larger are uploaded in parts")


class LocalArtifacts(DescriptorModel):
    """Artifacts on the local file system (one-node installs)."""

    kind: Literal["local"] = "local"
    root: str = "./var/artifacts"


def _kind_or(default: str) -> Callable[[Any], str]:
    """A discriminator that reads ``kind`` and falls back to ``default`` when it is not given."""

    def discriminate(value: Any) -> str:
        kind = value.get("kind", default) if isinstance(value, dict) else getattr(value, "kind", default)
        return str(kind)

    return discriminate


ArtifactsConfig = Annotated[
    Annotated[S3Artifacts, Tag("s3")] | Annotated[LocalArtifacts, Tag("local")],
    Discriminator(_kind_or("local"), custom_error_type="invalid_kind", custom_error_message="unknown artifacts kind"),
]


class DistributedStorage(DescriptorModel):
    """Many workers sharing PostgreSQL, Redis and an artifact store."""

    kind: Literal["distributed"]
    postgres: PostgresConfig
    redis: RedisConfig
    artifacts: ArtifactsConfig = Field(default_factory=LocalArtifacts)
    max_turn_attempts: int = Field(
        3,
        ge=1,
        le=100,
        description=(
            "how many times workers may begin a turn: one that killed its worker (or failed) this many times is "
            "parked, stored failed with code turn_poisoned, and its conversation takes new turns again"
        ),
    )


StorageConfig = Annotated[
    Annotated[EmbeddedStorage, Tag("embedded")] | Annotated[DistributedStorage, Tag("distributed")],
    Discriminator(
        _kind_or("embedded"),
        custom_error_type="invalid_kind",
        custom_error_message="unknown storage kind (known: embedded, distributed)",
    ),
]


Modality = Literal["text", "image", "pdf"]
PROVIDER_MODALITIES: dict[str, tuple[Modality, ...]] = {
    "anthropic": ("text", "image", "pdf"),
    "openai-compatible": ("text", "image"),
}
"""What a provider's models read by default; ``models.<role>.modalities`` says otherwise for one model."""


class ModelRef(DescriptorModel):
    """Which model a role uses, through which provider plugin."""

    provider: str = Field("anthropic", min_length=1, description="a model-provider plugin name")
    model: str = Field(min_length=1)
    max_output_tokens: int | None = Field(None, gt=0)
    context_window: int | None = Field(None, gt=0)
    api_key: SecretSetting | None = Field(None, description="defaults to the provider's own secret name")
    base_url: str | None = None
    output_limit_field: Literal["auto", "max_tokens", "max_completion_tokens"] = Field(
        "auto",
        description=(
            "openai-compatible: the request field that carries the output limit; auto sends "
            "max_completion_tokens to OpenAI's own API (its reasoning models refuse max_tokens) and max_tokens "
            "to any other server (vLLM, llama.cpp, Ollama)"
        ),
    )

    modalities: list[Modality] | None = Field(
        None,
        description=(
            "what the model reads besides text: image, pdf (default by provider: anthropic reads text, image and "
            "pdf; openai-compatible text and image; any other provider text only)"
        ),
    )
    image_max_mb: float = Field(
        5.0,
        gt=0,
        description=(
            "the largest image as sent: base64, 4/3 of the file, which is how Anthropic counts its 5 MB (a file of"
            " up to 3.75 MB); a larger image is downscaled to fit, and one that cannot be reaches the model as a"
            " placeholder"
        ),
    )
    image_max_side_px: int = Field(
        8000,
        gt=0,
        description=(
            "the longest side of an image, in pixels (Anthropic refuses images over 8000 px a side); a larger"
            " image is downscaled to fit"
        ),
    )
    pdf_max_mb: float = Field(10.0, gt=0, description="PDFs larger than this reach the model as their text")
    pdf_max_pages: int = Field(500, gt=0, description="PDFs with more pages reach the model as their text")

    def reads(self, modality: Modality) -> bool:
        """Whether the model takes ``modality`` in its prompt (``modalities``, else its provider's default)."""
        chosen = self.modalities if self.modalities is not None else PROVIDER_MODALITIES.get(self.provider, ("text",))
        return modality in chosen

    @property
    def label(self) -> str:
        """``provider:model`` as clients, logs and the price table see it; a model given as a file path (the
        scripted provider's script) shows its file name only, never a local path."""
        name = PurePath(self.model).name if "/" in self.model else self.model
        return f"{self.provider}:{name}"


DEFAULT_MODEL = ModelRef(
    provider="anthropic", model="claude-sonnet-5-5", max_output_tokens=8192, context_window=200_000
)


PriceKey = Annotated[
    str,
    Field(
        pattern=r"^[^\s]{1,200}$",
        description="'provider:model' (as turn.started's model names it) or the bare model name",
    ),
]


def _per_million(description: str) -> Any:
    return Field(ge=0, allow_inf_nan=False, description=f"USD per million {description}")


class ModelPrice(DescriptorModel):
    """What one model's tokens cost, in USD per million tokens (the provider's list price, or yours).

    Cache reads and writes are priced as input tokens unless given (providers usually charge less to read
    the cache and more to write it: give both to be exact).
    """

    input: float = _per_million("uncached input tokens")
    output: float = _per_million("output tokens")
    cache_read: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="USD per million input tokens read from the prompt cache"
    )
    cache_write: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="USD per million input tokens written to the prompt cache"
    )

    @field_validator("input", "output", "cache_read", "cache_write", mode="before")
    @classmethod
    def _number_not_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("a price is a number of USD per million tokens, not true/false")
        return value

    @property
    def cache_read_price(self) -> float:
        """USD per million cache-read tokens (the input price when not given)."""
        return self.input if self.cache_read is None else self.cache_read

    @property
    def cache_write_price(self) -> float:
        """USD per million cache-write tokens (the input price when not given)."""
        return self.input if self.cache_write is None else self.cache_write


class ModelsConfig(DescriptorModel):
    """The default model, named roles (``summarizer``, …) that fall back to it, and the models' prices."""

    default: ModelRef = DEFAULT_MODEL
    roles: dict[str, ModelRef] = Field(default_factory=dict)
    prices: dict[PriceKey, ModelPrice] = Field(
        default_factory=dict,
        description="USD per million tokens by 'provider:model' or model name; a model without a price has an "
        "unknown cost (null), never 0",
    )

    def for_role(self, role: str | None) -> ModelRef:
        """Return the model configured for ``role``, or the default when the role is not named."""
        return self.roles.get(role, self.default) if role else self.default

    def price_of(self, label: str) -> ModelPrice | None:
        """The price of the model labelled ``provider:model`` (see :attr:`ModelRef.label`): the entry of the
        label itself, else of the bare model name; None when the table has neither."""
        found = self.prices.get(label)
        if found is None:
            found = self.prices.get(label.partition(":")[2])
        return found


class ReactConfig(DescriptorModel):
    """Budgets and switches of the shared ReAct loop."""

    max_iterations: int = Field(15, ge=1, le=1000)
    context_budget_tokens: int = Field(150_000, ge=1_000)
    cache_ttl_seconds: int = Field(300, ge=0)
    multi_action: Literal["off", "safe_fanout"] = "off"
    compaction_threshold: float = Field(0.9, gt=0, le=1)
    cache_checkpoint_offset: int = Field(2, ge=1)
    conversation_titles: bool = Field(
        True, description="title a conversation with the summarizer role after its first answered turn"
    )
    result_preview_chars: int = Field(
        6_000,
        ge=200,
        le=1_000_000,
        description="how much of a tool result the timeline stores and every prompt shows; a longer result is "
        "capped there and kept whole as a file of its turn (react.read and the files route read it: tc:<turn>.<call>"
        ".result)",
    )
    steer: Literal["cancel_stream", "next_decision"] = Field(
        "cancel_stream",
        description="what a user's steer does while the model writes: stop that response and decide again "
        "with the steer (cancel_stream), or let it finish and see the steer at the next decision",
    )


class LocalExecProfile(DescriptorModel):
    """Executor in a bubblewrap sandbox on the host."""

    backend: Literal["local"]
    timeout_s: float = Field(60, gt=0)
    memory_mb: int = Field(1024, gt=0)
    pids: int = Field(128, gt=0)
    cpu_s: int = Field(60, gt=0)
    file_size_mb: int = Field(64, gt=0, description="the largest file (and stdout/stderr) a run may write")
    disk_mb: int = Field(512, gt=0, description="what work/ and out/ may hold together (a tmpfs per run)")
    isolation: Literal["auto", "bwrap", "landlock", "unshare", "none"] = Field(
        "auto",
        description="auto: bubblewrap when it works, else landlock when the kernel has landlock_min_abi, else "
        "unshare; landlock: the executor confines itself (Landlock, seccomp, rlimits), no privilege needed (a "
        "restricted Kubernetes pod); none: a plain subprocess (trusted code only)",
    )
    landlock_min_abi: int = Field(
        6,
        ge=1,
        description="the lowest Landlock ABI a landlock run starts under (6, Linux 6.12: files, TCP, signals and "
        "abstract sockets); on an older kernel runs are refused, unless lowered to accept less (4: no signal "
        "scoping; 1: files only)",
    )
    python: str = Field("/usr/bin/python3", description="the interpreter inside the sandbox")
    cgroups: bool = Field(True, description="cgroup v1 limits (memory of all processes, pids, CPU) where writable")


class DockerExecProfile(DescriptorModel):
    """Executor in a Docker container (split: sibling executor container; combined: one container)."""

    backend: Literal["docker"]
    image: str = Field("berth-exec:latest", description="the exec image (`berth exec build-image` builds it)")
    strategy: Literal["split", "combined"] = "split"
    docker_host: str | None = Field(None, description="the engine (default: DOCKER_HOST, else the local socket)")
    python: str = Field("/usr/bin/python3", description="the interpreter in the image")
    supervisor_python: str = Field(
        "/opt/berth-host/venv/bin/python", description="combined: a Python with Berth and the bundles installed"
    )
    mounts: list[str] = Field(
        default_factory=list,
        description="combined: source:target[:ro|rw] binds for the supervisor, hidden from the executor",
    )
    supervisor_network: str = Field("host", description="combined: the container's network (the supervisor's)")
    cpus: float = Field(1.0, gt=0)
    memory_mb: int = Field(2048, gt=0)
    pids: int = Field(256, gt=0)
    cpu_s: int = Field(120, gt=0)
    file_size_mb: int = Field(64, gt=0, description="the largest file (and stdout/stderr) a run may write")
    disk_mb: int = Field(512, gt=0, description="what work/ and out/ may hold together (a tmpfs per run)")
    timeout_s: float = Field(120, gt=0)


class FargateExecProfile(DescriptorModel):
    """Executor in an AWS ECS Fargate task: the supervisor and the executor in one task (``berth_aws.task``)."""

    backend: Literal["fargate"]
    cluster: str
    task_definition: str = Field(description="family[:revision] or ARN of the exec task definition")
    container_name: str = Field("exec", description="the task definition's container that runs the entry")
    subnets: list[str] = Field(min_length=1)
    security_groups: list[str] = Field(default_factory=list)
    assign_public_ip: bool = False
    artifacts_bucket: str = Field(description="the S3 bucket for each run's work/ snapshot and out/ (a prefix per run)")
    artifacts_prefix: str = Field("berth-exec", description="the key prefix of run snapshots and payload secrets")
    region: str | None = None
    endpoint_url: str | None = Field(None, description="an AWS-compatible endpoint (ECS, S3, Secrets Manager)")
    supervisor_python: str = Field(
        "/opt/berth-host/venv/bin/python", description="the task's Python with Berth, berth-aws and the bundles"
    )
    python: str = Field("/usr/bin/python3", description="the executor's interpreter in the task image")
    executor_namespaces: bool = Field(
        True,
        description=(
            "give the executor its own network and mount namespaces in the task (needs CAP_SYS_ADMIN, which "
            "Fargate does not grant: set false there and give the task a security group without egress)"
        ),
    )
    hidden_paths: list[str] = Field(
        default_factory=list, description="folders of the task the executor must not see (with executor_namespaces)"
    )
    memory_mb: int = Field(2048, gt=0, description="the executor's address-space limit (the task's own is its size)")
    pids: int = Field(256, gt=0)
    cpu_s: int = Field(600, gt=0)
    file_size_mb: int = Field(64, gt=0, description="the largest file (and stdout/stderr) a run may write")
    timeout_s: float = Field(900, gt=0, description="wall time of the program once the task runs")
    start_timeout_s: float = Field(300, gt=0, description="how long the task may take to reach RUNNING")
    stop_timeout_s: float = Field(120, gt=0, description="how long a stopped task may take to reach STOPPED")
    poll_interval_s: float = Field(2.0, gt=0, description="how often describe_tasks is asked")
    task_deadline_grace_s: float = Field(
        120,
        ge=0,
        description="the task ends the run itself this long after timeout_s, should its host die before stopping it",
    )


ExecProfile = Annotated[LocalExecProfile | DockerExecProfile | FargateExecProfile, Field(discriminator="backend")]


_DEFAULT_PROFILES: dict[str, LocalExecProfile | DockerExecProfile | FargateExecProfile] = {
    "sandbox": LocalExecProfile(backend="local")
}


class ExecConfig(DescriptorModel):
    """Isolated-execution profiles and which one ``exec.python`` uses by default."""

    default_profile: str = "sandbox"
    descriptor_payload_scope: Literal["active_bundle", "full"] = "active_bundle"
    profiles: dict[str, ExecProfile] = Field(default_factory=lambda: dict(_DEFAULT_PROFILES))
    runs_root: str | None = Field(
        None,
        description=(
            "the folder of the runs' work/out/program/socket folders (default: <temp dir>/berth-exec); with the "
            "docker backend's split strategy in a container, a host folder mounted at the same path, so the "
            "executor's sibling container sees the paths the host names. Read at start from the platform level."
        ),
    )
    uid_lock_dir: str = Field(
        "/run/berth-exec-uids",
        description=(
            "the folder of the executor uids' lock files (uid-<n>), shared by every host process of the machine so "
            "no two runs ever share a uid; a run holds its uid's flock while it runs. Read at start from the "
            "platform level."
        ),
    )
    sweep_interval_s: float = Field(
        60.0,
        gt=0,
        description=(
            "how often a host (API process, worker) removes what dead hosts left: run folders whose owner is gone, "
            "containers past their wall time, empty run cgroups (also done once at start)"
        ),
    )

    @model_validator(mode="after")
    def _default_profile_exists(self) -> ExecConfig:
        if self.default_profile not in self.profiles:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise ValueError(f"default_profile '{self.default_profile}' is not a profile (known: {known})")
        return self


class EmbedderConfig(DescriptorModel):
    """Embeddings for memory search."""

    provider: str = "builtin"
    model: str | None = None


class KnowledgeConfig(DescriptorModel):
    """Where knowledge spaces keep their indexes, and how they refresh (read from the platform level)."""

    root: str | None = Field(
        None,
        description=(
            "the folder of the spaces' indexes and the git checkout cache (relative to the descriptors folder); "
            "default: <embedded storage root>/knowledge, or ./var/knowledge with distributed storage"
        ),
    )
    max_file_bytes: int = Field(2 * 1024 * 1024, gt=0, description="larger files are skipped with a recorded reason")
    refresh_interval_s: float = Field(
        2.0, ge=0, description="a search checks its space's files for changes at most this often (in the background)"
    )
    first_index_wait_s: float = Field(
        30.0, ge=0, description="how long a search waits for a space's first index before answering 'indexing'"
    )


class RetentionConfig(DescriptorModel):
    """How long conversations are kept (per tenant or project), and how often the host deletes those past it."""

    conversations_days: float | None = Field(
        None,
        gt=0,
        description=(
            "delete a conversation (turns, events, files, memory, feedback, title) this many days after its last "
            "activity; null keeps conversations until their owner deletes them"
        ),
    )
    sweep_interval_s: float = Field(
        3600.0,
        gt=0,
        description="how often a host looks for conversations past their retention (read from the platform level)",
    )


class MetricsConfig(DescriptorModel):
    """Who may read ``/metrics`` (it names every tenant and its usage)."""

    access: Literal["admin", "open"] = Field(
        "admin",
        description="admin: an API key with the admin role (Authorization: Bearer …); open: anyone who reaches it",
    )


class ToolThreadsConfig(DescriptorModel):
    """The threads bundles' sync tools run in: a bounded set per bundle and tenant, never shared with storage
    (read from the platform level)."""

    size: int = Field(
        4,
        ge=1,
        le=256,
        description="threads one bundle's sync tools may use at once for one tenant; a call beyond them waits "
        "for one (within its timeout_s)",
    )
    degraded_at: int | None = Field(
        None,
        ge=1,
        description="stuck threads (their call timed out or was cancelled, the thread still runs) at which the "
        "bundle is degraded for that tenant: its new sync tool calls end at once with tool_pool_exhausted until "
        "enough of them return; default: size (every thread stuck)",
    )

    @model_validator(mode="after")
    def _degraded_at_within_size(self) -> ToolThreadsConfig:
        if self.degraded_at is not None and self.degraded_at > self.size:
            raise ValueError(f"degraded_at ({self.degraded_at}) must not exceed size ({self.size})")
        return self

    @property
    def stuck_limit(self) -> int:
        """The stuck threads that degrade a bundle for a tenant (``degraded_at``, else ``size``)."""
        return self.degraded_at if self.degraded_at is not None else self.size


class ReadinessConfig(DescriptorModel):
    """What ``/readyz`` waits for (read from the platform level)."""

    storage_timeout_s: float = Field(
        2.0,
        gt=0,
        le=60,
        description="how long /readyz waits for its storage round-trip (a write and a read through the store's "
        "own threads) before it answers 503",
    )


RESIDENT_CONVERSATIONS_MAX_MB_LIMIT = 1024 * 1024
"""The largest ``resident_conversations.max_mb`` accepted (1 TiB): a larger value is a number of bytes given
as MiB, not a budget."""


class ResidentConversationsConfig(DescriptorModel):
    """What a host process keeps in memory of idle conversations between their turns (read from the platform
    level): their timelines and rendered prompt parts, so a conversation's next turn does not read and render its
    history again. Past the budget the least recently used idle conversations are dropped, and read back from
    the store when their next turn starts."""

    max_mb: float = Field(
        256,
        ge=0,
        le=RESIDENT_CONVERSATIONS_MAX_MB_LIMIT,
        allow_inf_nan=False,
        description="MiB of idle conversations one process keeps in memory (all tenants together; 0 keeps none: "
        "every turn reads its conversation from the store)",
    )

    @field_validator("max_mb", mode="before")
    @classmethod
    def _a_number_of_mib(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError(f"max_mb is a number of MiB, like 256, not {value!r}")
        try:
            number = float(value) if isinstance(value, int | float | str) else None
        except ValueError:
            number = None  # not a number: pydantic says so
        if number is not None and number > RESIDENT_CONVERSATIONS_MAX_MB_LIMIT:
            raise ValueError(
                f"max_mb is in MiB: {value} MiB is more than 1 TiB (give 256 for 256 MiB, not a number of bytes)"
            )
        return value

    @property
    def max_bytes(self) -> int:
        """The budget in bytes."""
        return int(self.max_mb * 1024 * 1024)


class PlatformConfig(DescriptorModel):
    """The ``platform:`` section: settings every tenant inherits."""

    storage: StorageConfig = Field(default_factory=EmbeddedStorage)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    react: ReactConfig = Field(default_factory=ReactConfig)
    exec: ExecConfig = Field(default_factory=ExecConfig)
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    knowledge: KnowledgeConfig = Field(default_factory=KnowledgeConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    tool_threads: ToolThreadsConfig = Field(default_factory=ToolThreadsConfig)
    readiness: ReadinessConfig = Field(default_factory=ReadinessConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    resident_conversations: ResidentConversationsConfig = Field(default_factory=ResidentConversationsConfig)
    secret_providers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="options per secret-provider plugin, e.g. aws-sm: {region: ...}"
    )


if TYPE_CHECKING:  # the overrides are built at run time; to the type checker they are plain models
    ReactOverride: TypeAlias = DescriptorModel
    ModelsOverride: TypeAlias = DescriptorModel
    ExecOverride: TypeAlias = DescriptorModel
    EmbedderOverride: TypeAlias = DescriptorModel
    RetentionOverride: TypeAlias = DescriptorModel
else:
    ReactOverride = partial_model(ReactConfig, "ReactOverride")
    ModelsOverride = partial_model(ModelsConfig, "ModelsOverride")
    ExecOverride = partial_model(ExecConfig, "ExecOverride")
    EmbedderOverride = partial_model(EmbedderConfig, "EmbedderOverride")
    RetentionOverride = partial_model(RetentionConfig, "RetentionOverride")

OVERRIDABLE_SECTIONS = ("models", "react", "exec", "embedder", "retention")


class ProjectConfig(DescriptorModel):
    """One project of a tenant: a title and overrides of the tenant's settings."""

    title: str | None = None
    models: ModelsOverride | None = None
    react: ReactOverride | None = None
    exec: ExecOverride | None = None
    embedder: EmbedderOverride | None = None
    retention: RetentionOverride | None = None


class TenantConfig(DescriptorModel):
    """One tenant: overrides of the platform's settings and its projects."""

    title: str | None = None
    models: ModelsOverride | None = None
    react: ReactOverride | None = None
    exec: ExecOverride | None = None
    embedder: EmbedderOverride | None = None
    retention: RetentionOverride | None = None
    projects: dict[ScopeName, ProjectConfig] = Field(default_factory=dict)


def _default_tenants() -> dict[str, TenantConfig]:
    return {"default": TenantConfig(projects={"default": ProjectConfig(title="Default project")})}


class AssemblyDescriptor(DescriptorModel):
    """``assembly.yaml``."""

    platform: PlatformConfig = Field(default_factory=PlatformConfig)
    tenants: dict[ScopeName, TenantConfig] = Field(
        default_factory=_default_tenants,
        description="tenants and their projects; defaults to one tenant 'default' with project 'default'",
    )

    def has_scope(self, tenant: str, project: str | None = None) -> bool:
        """True when ``tenant`` (and ``project`` of it, if given) is declared."""
        declared = self.tenants.get(tenant)
        return declared is not None and (project is None or project in declared.projects)

    def scopes(self) -> list[tuple[str, str]]:
        """Every declared (tenant, project) pair, sorted."""
        return sorted((t, p) for t, cfg in self.tenants.items() for p in cfg.projects)
