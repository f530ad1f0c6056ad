"""SQL front end: sqlglot parsing of crr DDL/DML, SPJR+UNION validation, and view -> delta-merge plans."""
