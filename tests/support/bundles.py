"""Hand-built WARC bundles for hostile-bundle and machine-failure tests."""

from __future__ import annotations

import io
import json
from pathlib import Path

from engines.base import config_hash
from archive.bundle import BUNDLE_FORMAT, H_ATTEMPT, H_CONFIG, H_EPOCH, H_TEXTS


LEANSEARCH = {"engine": "leansearch", "endpoint_version": "post-search-v1", "num_results": 50}
PUBLIC = "https://leansearch.net/search"


class Bundle:
    """A bundle written record by record, as ``engines export`` writes it (or not quite)."""

    def __init__(self, path: Path, configs: list[dict] = ()) -> None:
        from warcio.warcwriter import WARCWriter

        self.path = path
        self.fh = open(path, "wb")
        self.w = WARCWriter(self.fh, gzip=True, warc_version="WARC/1.1")
        if configs:
            lines = [f"format: {BUNDLE_FORMAT}"] + ["config: " + json.dumps(c) for c in configs]
            info = ("\r\n".join(lines) + "\r\n").encode()
            self.w.write_record(self.w.create_warc_record(path.name, "warcinfo", payload=io.BytesIO(info),
                                                          length=len(info),
                                                          warc_content_type="application/warc-fields"))

    def pair(self, url: str, texts: list[str], answer: bytes, *, h: str | None = None, headers: dict | None = None,
             rid: str | None = None, resp_rid: str | None = None, encoding: str | None = None,
             concurrent: bool = True) -> None:
        from warcio.statusandheaders import StatusAndHeaders

        body = json.dumps({"query": texts, "num_results": 50}).encode()
        meta = {}
        if h:
            meta = {H_CONFIG: h, H_EPOCH: "0", H_ATTEMPT: "1", H_TEXTS: json.dumps(texts), **(headers or {})}
        if rid:
            meta["WARC-Record-ID"] = rid
        req = self.w.create_warc_record(url, "request", payload=io.BytesIO(body), length=len(body),
                                        http_headers=StatusAndHeaders("POST /search HTTP/1.1",
                                                                      [("Content-Type", "application/json")],
                                                                      is_http_request=True),
                                        warc_headers_dict=meta)
        rh = [("Content-Type", "application/json")] + ([("Content-Encoding", encoding)] if encoding else [])
        resp_meta = {"WARC-Record-ID": resp_rid} if resp_rid else {}
        if concurrent:
            resp_meta["WARC-Concurrent-To"] = req.rec_headers.get_header("WARC-Record-ID")
        resp = self.w.create_warc_record(url, "response", payload=io.BytesIO(answer), length=len(answer),
                                         http_headers=StatusAndHeaders("200 OK", rh, protocol="HTTP/1.1"),
                                         warc_headers_dict=resp_meta)
        if concurrent:
            req.rec_headers.add_header("WARC-Concurrent-To", resp.rec_headers.get_header("WARC-Record-ID"))
        self.w.write_record(req)
        self.w.write_record(resp)

    def close(self) -> Path:
        self.fh.close()
        return self.path


def _config(params: dict) -> dict:
    return {"config_hash": config_hash(params), "engine": params["engine"],
            "endpoint_version": params["endpoint_version"], "params": params, "label": params["engine"]}
