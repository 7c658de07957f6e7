"""Every read of a user's file and every write of one: `inputs` (only regular files, checked before use, read
never mapped, the sources guarded while they are read), `outputs` (written beside their final names, put in place
together only when all is well) and `digests` (a source's digest and a stored checksum, on another core)."""
