"""Headless chromium: render a page and read what the probe script found."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


PROBE = """
<script>
(function(){
  var out = {};
  var rows = document.querySelectorAll('table.board tbody tr');
  out.board_rows = rows.length;
  out.board_row_heights = Array.prototype.map.call(rows, function(r){ return r.getBoundingClientRect().height; });
  out.curves = Array.prototype.map.call(document.querySelectorAll('svg.curve'), function(svg){
    var r = svg.getBoundingClientRect();
    return {metric: svg.dataset.metric, width: r.width, height: r.height,
            lines: Array.prototype.map.call(svg.querySelectorAll('path.line'), function(p){ return p.getTotalLength(); }),
            bands: Array.prototype.map.call(svg.querySelectorAll('polygon.band'), function(p){
              var b = p.getBBox(); return b.width * b.height; })};
  });
  var qrows = document.querySelectorAll('#queries-table tbody tr');
  out.query_rows = qrows.length;
  var f = document.getElementById('qfilter');
  f.value = 'Q12_'; f.dispatchEvent(new Event('input'));
  out.visible_after_filter = Array.prototype.filter.call(qrows, function(r){ return r.style.display !== 'none'; }).length;
  out.count_text = document.getElementById('qcount').textContent;
  f.value = ''; f.dispatchEvent(new Event('input'));
  var st = document.getElementById('qstate'); st.value = 'none'; st.dispatchEvent(new Event('change'));
  out.visible_missed = Array.prototype.filter.call(qrows, function(r){ return r.style.display !== 'none'; }).length;
  st.value = ''; st.dispatchEvent(new Event('change'));
  var board = document.querySelector('table.board');
  var heads = Array.prototype.map.call(board.tHead.rows[0].cells, function(th){ return th.textContent; });
  var col = heads.indexOf('R@1');
  board.tHead.rows[0].cells[col].click();
  out.sorted_by_r1 = Array.prototype.map.call(board.tBodies[0].rows, function(r){ return r.dataset.system; });
  board.tHead.rows[0].cells[col].click();
  out.sorted_by_r1_reversed = Array.prototype.map.call(board.tBodies[0].rows, function(r){ return r.dataset.system; });
  var qt = document.getElementById('queries-table');
  var qheads = qt.tHead.rows[0].cells, last = qheads.length - 1;
  qheads[last].click();
  out.rank_order = Array.prototype.map.call(qt.tBodies[0].rows, function(r){ return r.cells[last].textContent; });
  var banner = document.querySelector('.banner');
  out.banner = banner ? banner.textContent : null;
  out.banner_height = banner ? banner.getBoundingClientRect().height : 0;
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("headless Chromium not found: install Debian's `chromium` (.ci/run does when missing)")
    return exe


def run_chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1280,2000", *args, url,
    ]
    return subprocess.run(cmd, capture_output=True, timeout=120, check=False)
