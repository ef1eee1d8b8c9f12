"""The HTTP load: requests streamed through httpx, one record per request."""
