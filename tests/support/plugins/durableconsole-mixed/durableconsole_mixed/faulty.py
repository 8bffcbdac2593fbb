import os

TOKEN = os.environ["MIXED_API_TOKEN_NEVER_SET"]
