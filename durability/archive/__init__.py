"""Archives: what a sweep deletes, kept as gzip JSON Lines, and read back read-only.

``format`` writes and reads the archive (documented in ``docs/formats/archive.md``); ``store``
opens a directory of archives as a read-only store (``durability.open("archive:///DIR")``), so
every frame, notebook and copy works on it.
"""

from __future__ import annotations

from durability.archive.format import ARCHIVE_FORMAT, ARCHIVE_VERSION, ArchiveWriter, read_archive

__all__ = ["ARCHIVE_FORMAT", "ARCHIVE_VERSION", "ArchiveWriter", "read_archive"]
