"""UI widgets a bundle shows in the web UI's side panel (served under
``/v1/{tenant}/{project}/bundles/{bundle}/widgets/{alias}/{ticket}/``, to the scopes that enable the bundle)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Widget(BaseModel):
    """One widget: static files (a folder with ``index.html``) or a single HTML document."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    title: str
    static_dir: Path | None = None
    html: str | None = None
    icon: str | None = None

    @model_validator(mode="after")
    def _exactly_one_body(self) -> Widget:
        if (self.static_dir is None) == (self.html is None):
            raise ValueError("give exactly one of 'static_dir' or 'html'")
        return self

    def problems(self) -> list[str]:
        """What is wrong with the widget's files (empty when it can be served)."""
        if self.static_dir is None:
            return []
        if not self.static_dir.is_dir():
            return [f"widget '{self.alias}': static_dir {self.static_dir} does not exist"]
        if not (self.static_dir / "index.html").is_file():
            return [f"widget '{self.alias}': {self.static_dir} has no index.html"]
        return []
