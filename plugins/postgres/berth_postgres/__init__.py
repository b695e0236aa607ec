"""PostgreSQL storage for Berth (asyncpg): conversations, metadata and the memory index, with migrations."""
