"""Storage, the floor every stage reads and writes data through: objects and their ranges, containers
and their members, the bounded object cache, and the audio of a record.

storage (S3 URLs, the one client, reads by range, a local copy per object version), object_cache (the
size bound on those copies), containers (tars and Parquet files: members read in place, by offset or
range), audio (paths inside an audio root, headers, the one reading of a span, a span's key). It
stands on sharflow.core and imports no stage.
"""
