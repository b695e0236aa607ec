"""Built-in tool packs: platform plugins whose tools a bundle enables with ``ToolPack(id="<id>")``."""
