"""The console: thin function-based views over the named operations, one
module per resource (as `urls` lists them).

HTMX requests get the partial they asked for; plain form posts get a
redirect, so every action also works without JavaScript.
"""
