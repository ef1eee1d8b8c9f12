"""A trial's launch: the server argv and environment, shown, checked and exported the same way."""
