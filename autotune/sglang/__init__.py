"""Everything tied to an SGLang release: its argument rules, flag names, wire names, and the
built-in twin of its parser. Nothing here imports another autotune package."""
