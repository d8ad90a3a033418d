#!/usr/bin/env python3
"""Uploads a file to Herald's /v1/uploads with tuspy, the tus project's Python client, unchanged.

    python3 tus_upload.py --url BASE/v1/uploads --key KEY --file PATH --type image/jpeg [--chunk-size N]
                          [--description TEXT] [--checksum] [--resume-url URL] [--stop-after N]

Prints one JSON line: {"url": the upload's URL, "offset": bytes the server holds, "patches": PATCHes sent}.
--stop-after N sends N chunks and stops (an upload left half done); --resume-url goes on with an upload made
before, from the offset its HEAD reports (tuspy's own resume); --checksum sends Upload-Checksum (sha1).
"""

import argparse
import json
import sys

from tusclient import client


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--type", required=True)
    parser.add_argument("--chunk-size", type=int, default=1 << 20)
    parser.add_argument("--description")
    parser.add_argument("--checksum", action="store_true")
    parser.add_argument("--resume-url")
    parser.add_argument("--stop-after", type=int)
    arguments = parser.parse_args()

    tus = client.TusClient(arguments.url, headers={"Authorization": f"Bearer {arguments.key}"})
    metadata = {"filetype": arguments.type, "filename": "clip"}
    if arguments.description:
        metadata["description"] = arguments.description
    uploader = tus.uploader(
        arguments.file,
        chunk_size=arguments.chunk_size,
        metadata=metadata,
        url=arguments.resume_url,
        upload_checksum=arguments.checksum,
    )
    patches = 0
    if arguments.stop_after is not None:
        for _ in range(arguments.stop_after):
            uploader.upload_chunk()
            patches += 1
    else:
        while uploader.offset < uploader.get_file_size():
            uploader.upload_chunk()
            patches += 1
    print(json.dumps({"url": uploader.url, "offset": uploader.offset, "patches": patches}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
