"""Export: the winning launch command of a search, checked by SGLang's parser."""
