-- Knowledge: look a symbol up by its name. A code chunk's title is its qualified name (`BaseModel.model_validate`);
-- a search that names `model_validate` (or `BaseModel.model_validate`) looks for titles equal to it or ending in
-- `.model_validate`, which no index of the title can seek. This one indexes the title's last dotted part, lower-cased:
-- every such title has the symbol's last part there, so the look-up seeks it and checks the few rows it finds.
CREATE INDEX knowledge_chunks_by_name ON knowledge_chunks (space_id, lower(regexp_replace(title, '^.*\.', '')));
