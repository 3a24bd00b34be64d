"""The class's data: share links, the roster, submissions and leaderboards, in SQLite (see db.py)."""
from .db import Database, StoreError
from .store import ShareError, Store, hash_password, share_digest, utf8_size, verify_password

__all__ = ["Database", "Store", "StoreError", "ShareError", "hash_password", "verify_password", "share_digest", "utf8_size"]
