"""Search spaces: the YAML schema, its rules, the define-by-run, the workload and SGLang's default
in the space's terms."""
