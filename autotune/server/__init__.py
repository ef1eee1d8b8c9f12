"""The server process: started in its own group on a free port, dead on every path."""
