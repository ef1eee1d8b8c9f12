"""Built-in data files (the prompt set) and the script that generates them."""
