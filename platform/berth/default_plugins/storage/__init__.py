"""Built-in storage backends: the embedded SQLite store (and memory index) under a root folder."""
