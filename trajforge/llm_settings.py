"""The model endpoints' settings (`llm:` in a run config, `TRAJFORGE_LLM_*`): the shared
OpenAI-compatible endpoint and each stage group's own, with their limits and prices.

They belong to the kernel's model I/O (the gateway and the endpoint probe read them), so that part
needs nothing of the configuration's other areas; `trajforge.settings` composes them into
`Settings`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

STAGE_GROUPS = ("policy", "critics", "writer", "bottleneck")


class EndpointSettings(BaseModel):
    """One stage group's endpoint (`llm.policy`, `llm.critics`, `llm.writer`, `llm.bottleneck`):
    every field left unset is the shared `llm:` one's."""

    model_config = {"extra": "forbid"}

    base_url: str | None = Field(None, description="This group's endpoint; unset: llm.base_url.")
    model: str | None = Field(None, min_length=1, description="The model it serves; unset: llm.model.")
    api_key: SecretStr | None = Field(None, description="Its bearer token; unset: llm.api_key.")
    concurrency: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Most requests in flight; unset: llm.concurrency (policy: the farm size).",
    )
    max_tokens: int | None = Field(None, ge=1, description="Completion budget; unset: llm.max_tokens.")
    max_images: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Most images per request (vLLM's --limit-mm-per-prompt); unset: llm.max_images.",
    )
    prompt_usd_per_1k: float | None = Field(None, ge=0, description="Its price of 1k prompt tokens.")
    completion_usd_per_1k: float | None = Field(None, ge=0, description="Its price of 1k completion tokens.")


class LLMSettings(BaseSettings):
    """The OpenAI-compatible endpoint behind every model call. Unset base_url: offline.

    The stage groups (`policy`: rollouts; `critics`: step and trajectory critics; `writer`: CSRS,
    thoughts, guidance, query synthesis; `bottleneck`: the thoughts' bottleneck measurement) each
    may name their own endpoint, model, key, limits and prices; what one leaves unset is shared."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_LLM_", extra="forbid")

    base_url: str | None = Field(None, description="e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang).")
    api_key: SecretStr = Field(SecretStr("EMPTY"), description="Bearer token for the endpoint.")
    model: str = Field("gpt-4o-mini", min_length=1, description="Default model name.")
    concurrency: int = Field(16, ge=1, le=1024, description="Most requests in flight at once.")
    requests_per_second: float = Field(
        0.0, ge=0, description="Rate limit across all calls; 0 means unlimited."
    )
    max_retries: int = Field(5, ge=0, le=20, description="Retries on 429, 5xx and timeouts.")
    backoff_base_s: float = Field(0.5, gt=0, le=60, description="First backoff; doubles per retry.")
    backoff_max_s: float = Field(30.0, gt=0, le=600, description="Longest single backoff.")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="Per-request timeout.")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="Completion budget of every call whose stage sets none (critics, CSRS, thoughts, "
        "guidance); None: the server's own default. The policy's is `policy.max_tokens`.",
    )
    max_images: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Most images one request carries (vLLM: --limit-mm-per-prompt image=N): a policy "
        "drops its oldest history screenshots, a critic joins its views side by side (None: no limit).",
    )
    prompt_usd_per_1k: float = Field(0.0, ge=0, description="Price of 1k prompt tokens.")
    completion_usd_per_1k: float = Field(0.0, ge=0, description="Price of 1k completion tokens.")
    policy: EndpointSettings = Field(default_factory=EndpointSettings, description="Rollouts' endpoint.")
    critics: EndpointSettings = Field(
        default_factory=EndpointSettings, description="Model critics' endpoint."
    )
    writer: EndpointSettings = Field(
        default_factory=EndpointSettings, description="CSRS, thoughts, guidance and query synthesis."
    )
    bottleneck: EndpointSettings = Field(
        default_factory=EndpointSettings, description="The bottleneck measurement's endpoint."
    )

    @property
    def offline(self) -> bool:
        """No endpoint at all: neither the shared one nor any stage group's."""
        return self.base_url is None and all(getattr(self, g).base_url is None for g in STAGE_GROUPS)

    def for_group(self, group: str) -> LLMSettings:
        """The settings a stage group's calls run under: its own fields over the shared ones (a group
        with no endpoint of its own and none shared has `base_url` None: offline)."""
        own = getattr(self, group).model_dump(exclude_none=True)
        return self.model_copy(update={**own, **{g: EndpointSettings() for g in STAGE_GROUPS}})

    def endpoints(self) -> dict[str, LLMSettings]:
        """Each online stage group's settings, by group."""
        out = {g: self.for_group(g) for g in STAGE_GROUPS}
        return {g: llm for g, llm in out.items() if llm.base_url is not None}
