#!/usr/bin/env python3
"""End-to-end browser test of Herald's web dashboard (GET /), driven by Selenium and headless Chromium.

What it checks, one screenshot per step (01-key.png, 02-signed-in.png, ...) in --out:
  a. the key prompt; signing in with an admin key shows the queue, the job list and a live event stream;
  b. publishing two small PNGs through the composer (file input, text, Publish): the new job appears and
     reaches `succeeded` in the list without a reload, every upload bar full;
  c. publishing one PNG of at least 1 MiB: its job reaches `running` with a partial upload bar; its Cancel
     button brings it to `cancelled`; Re-publish on it creates a new job for the same post, which is
     cancelled too (the test's media store hangs on large objects, so nothing is left running);
  d. publishing a 20 MiB PNG: the composer sends it through tus (POST /v1/uploads, PATCHes of 8 MiB), not
     POST /v1/media; the script cuts the browser's network in the middle of the second PATCH (a TCP relay between
     the browser and Herald resets every connection; DevTools' offline mode lets a request being sent finish) and
     brings it back once the file's note says it resumes and a HEAD has failed. Checked: the dropped PATCH, a
     later HEAD that finds part of it on the server, a PATCH from that offset, the bar never below it, the file
     row ending `uploaded`, and the media (GET /v1/media/{id}) of the right size and SHA-256; its job runs with a
     half-done upload and is cancelled;
  e. Pause queue shows the queue paused, Resume queue shows it active again (admin key);
  f. figures on a fresh load: the page's own transfer size (navigation + resources, /v1 calls and the
     event stream excluded; must be under 50 KiB), first-contentful-paint, and the number of requests
     the page makes in a 10 s idle window once everything settled (from the chromedriver performance
     log; must be 0: the page keeps one event stream open and never polls);
  g. screenshots of a phone-size window (390x844, no horizontal scrolling) and of dark mode
     (Emulation.setEmulatedMedia prefers-color-scheme: dark);
  h. any browser console entry of level SEVERE or WARNING fails the run (but the failed requests and the 409 and
     423 answers step d causes on purpose).
On success it prints one JSON line with the figures and writes it to OUT/results.json (exit 0); on any
failure it prints the reason on stderr (and leaves a *-failed.png screenshot) and exits 1.

It needs Python 3 with `selenium`, Debian's `chromium` and `chromium-driver`, and a running Herald that
serves the dashboard and whose key is an admin key:

    python3 Tests/Browser/dashboard_test.py --url http://127.0.0.1:8080 --key hrld_... --out /tmp/dashboard-shots
"""
import argparse
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse
import urllib.request
import zlib

from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

PAGE_LIMIT = 50 * 1024
IDLE_SECONDS = 10
MIB = 1024 * 1024
CHUNK = 8 * MIB  # the dashboard's PATCH size


class StepFailed(Exception):
    pass


def png(width, height, seed):
    """A valid, small RGB PNG."""
    rows = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in ((x * 8 + seed) % 256, (y * 8) % 256, (seed * 60 + x * y) % 256))
        for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def big_png(size):
    """A PNG signature and header followed by padding: the server checks magic bytes only."""
    head = png(1, 1, 0)[:33]  # signature + IHDR chunk
    return head + b"\x00" * (size - len(head))


def reset(sock):
    """Closes a socket with a TCP reset, as a dropped connection."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)  # also wakes the thread reading it
    except OSError:
        pass
    sock.close()


class Relay:
    """A TCP relay between the browser and Herald: a network the test can cut and bring back.

    DevTools' offline emulation (Network.emulateNetworkConditions) lets a request whose body is being sent finish, so
    it cannot drop a PATCH in flight; cut() resets every open connection, and every new one until restore().
    """

    def __init__(self, host, port):
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.live = set()
        self.down = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                upstream = None
            with self.lock:  # with cut(), so that no connection opened meanwhile escapes it
                up = upstream is not None and not self.down
                if up:
                    self.live |= {client, upstream}
            if not up:
                reset(client)
                if upstream:
                    upstream.close()
                continue
            ended = []
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pipe, args=(src, dst, ended), daemon=True).start()

    def pipe(self, src, dst, ended):
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (src, dst):  # one side broke: so does the other
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        with self.lock:
            ended.append(src)
            done = len(ended) == 2
            if done:
                self.live -= {src, dst}
        if done:
            src.close()
            dst.close()

    def cut(self):
        with self.lock:
            self.down = True
            live, self.live = self.live, set()
        for sock in live:
            reset(sock)

    def restore(self):
        with self.lock:
            self.down = False


class Run:
    def __init__(self, args):
        self.args = args
        self.base = args.url.rstrip("/")
        # The browser goes through the relay (a network to cut); the script's own API calls go straight to Herald.
        target = urllib.parse.urlsplit(self.base)
        self.relay = Relay(target.hostname, target.port or 80)
        self.page = "http://127.0.0.1:%d" % self.relay.port
        self.figures = {}
        self.out = os.path.abspath(args.out)
        self.shot_no = 0
        self.console = []
        self.created_jobs = []
        opts = webdriver.ChromeOptions()
        opts.binary_location = args.chromium
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
                  "--disable-background-networking", "--disable-component-update", "--no-first-run",
                  "--disable-extensions", "--disable-sync", "--lang=en-US"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        self.d = webdriver.Chrome(service=Service(args.chromedriver), options=opts)
        self.viewport(1280, 900)

    # helpers ---------------------------------------------------------------------------------

    def shot(self, name, top=True):
        """Saves the next numbered screenshot, scrolled to the top of the page unless top is False."""
        if top:
            self.js("window.scrollTo(0, 0)")
        self.shot_no += 1
        path = os.path.join(self.out, "%02d-%s.png" % (self.shot_no, name))
        self.d.save_screenshot(path)
        return path

    def viewport(self, width, height):
        """Sizes the window so that the page's viewport is width x height CSS pixels."""
        self.d.set_window_size(width, height)
        w, h = self.js("return [window.innerWidth, window.innerHeight]")
        if (w, h) != (width, height):
            self.d.set_window_size(2 * width - w, 2 * height - h)

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def wait(self, what, cond, timeout=30):
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.1).until(lambda d: cond())
        except TimeoutException:
            raise StepFailed("timed out after %d s waiting for %s" % (timeout, what)) from None

    def drain_console(self, expected=lambda e: False):
        """Keeps the console entries of level SEVERE or WARNING, but those `expected` says the step caused on purpose."""
        for e in self.d.get_log("browser"):
            if e.get("level") in ("SEVERE", "WARNING") and not expected(e):
                self.console.append("%s: %s" % (e.get("level"), e.get("message")))

    def network_log(self):
        """Drains the performance log; returns its Network.* events since the last call, in order."""
        events = (json.loads(entry["message"])["message"] for entry in self.d.get_log("performance"))
        return [m for m in events if m.get("method", "").startswith("Network.")]

    def perf_requests(self):
        """Drains the performance log; returns the URLs of the requests sent since the last call."""
        return [m["params"]["request"]["url"] for m in self.network_log() if m["method"] == "Network.requestWillBeSent"]

    def get(self, path):
        """A GET of Herald's API with the key, straight to the server; the JSON answer."""
        req = urllib.request.Request(self.base + path, headers={"Authorization": "Bearer " + self.args.key})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.load(r)
        except OSError as e:
            raise StepFailed("GET %s: %s" % (path, e)) from None

    def job_ids(self):
        return self.js("return [...document.querySelectorAll('#job-list li.job')].map(e => e.dataset.jobId)")

    def job(self, job_id):
        """State, post id, upload bars and buttons of one job element, or None."""
        return self.js("""
            const li = document.querySelector(`li.job[data-job-id="${arguments[0]}"]`);
            if (!li) return null;
            const vis = (sel) => { const b = li.querySelector(sel); return b && !b.hidden ? b.getAttribute('aria-label') : null; };
            return {state: li.dataset.state, post: li.dataset.postId,
                    bars: [...li.querySelectorAll('.uploads progress')].map(p => [p.hasAttribute('value') ? p.value : null, p.max]),
                    cancel: vis('button[data-action=cancel]'), republish: vis('button[data-action=republish]')};
        """, job_id)

    def wait_state(self, job_id, states, timeout=60):
        return self.wait("job %s to be %s" % (job_id, "/".join(states)),
                         lambda: (self.job(job_id) or {}).get("state") in states and self.job(job_id), timeout)

    def click_job_button(self, job_id, action):
        b = self.d.find_element(By.CSS_SELECTOR, 'li.job[data-job-id="%s"] button[data-action="%s"]' % (job_id, action))
        if not b.is_displayed():
            raise StepFailed("the %s button of job %s is not shown" % (action, job_id))
        b.click()

    def publish(self, paths, text):
        before = set(self.job_ids())
        self.d.find_element(By.ID, "files").send_keys("\n".join(paths))
        self.wait("%d chosen files" % len(paths), lambda: self.js("return document.querySelectorAll('#file-list li').length") == len(paths))
        box = self.d.find_element(By.ID, "text")
        box.clear()
        box.send_keys(text)
        return before

    def new_job(self, before, timeout=60):
        def found():
            ids = [i for i in self.job_ids() if i not in before]
            return ids[0] if ids else None
        job_id = self.wait("a new job in the list", found, timeout)
        self.created_jobs.append(job_id)
        return job_id

    def check_accessible_names(self):
        missing = self.js("""
            const out = [];
            for (const e of document.querySelectorAll('input, select, textarea'))
              if (!e.labels.length && !e.getAttribute('aria-label')) out.push(e.id || e.name || e.type);
            for (const b of document.querySelectorAll('button'))
              if (!(b.getAttribute('aria-label') || b.textContent.trim())) out.push('button');
            return out;""")
        if missing:
            raise StepFailed("controls without an accessible name: %s" % missing)

    # steps -------------------------------------------------------------------------------------

    def step_a_sign_in(self):
        self.d.get(self.page + "/")
        self.wait("the key prompt", lambda: self.d.find_element(By.ID, "key").is_displayed())
        if self.js("return document.activeElement.id") != "key":
            raise StepFailed("the key field does not have the focus at start")
        self.shot("key")
        self.d.find_element(By.ID, "key").send_keys(self.args.key)
        self.d.find_element(By.ID, "key-submit").click()
        self.wait("the dashboard", lambda: self.d.find_element(By.ID, "dash").is_displayed())
        self.wait("the queue counts", lambda: self.d.find_element(By.ID, "q-running").text.isdigit())
        self.wait("the job list", lambda: self.js(
            "return !document.getElementById('j-empty').hidden || document.querySelectorAll('#job-list li.job').length > 0"))
        self.wait("the live event stream", lambda: self.js("return document.getElementById('conn').dataset.state") == "live")
        self.check_accessible_names()
        self.shot("signed-in")

    def step_b_small(self):
        paths = []
        for i in (1, 2):
            p = os.path.join(self.out, "small-%d.png" % i)
            with open(p, "wb") as f:
                f.write(png(48, 32, i))
            paths.append(p)
        before = self.publish(paths, "Two small images from the browser test")
        self.shot("composed")
        self.d.find_element(By.ID, "publish").click()
        job_id = self.new_job(before)
        job = self.wait_state(job_id, ("succeeded", "failed", "cancelled"), 90)
        if job["state"] != "succeeded":
            raise StepFailed("the small job %s ended %s" % (job_id, job["state"]))
        if len(job["bars"]) != 2 or any(v is None or v < m for v, m in job["bars"]):
            raise StepFailed("the succeeded job's upload bars are not full: %s" % job["bars"])
        self.shot("small-succeeded")
        self.small_job = job_id

    def step_c_large(self):
        p = os.path.join(self.out, "large.png")
        with open(p, "wb") as f:
            f.write(big_png(1024 * 1024 + 64 * 1024))
        before = self.publish([p], "One large image, to be cancelled")
        self.d.find_element(By.ID, "publish").click()
        job_id = self.new_job(before, 120)
        self.wait("job %s running with a partial upload bar" % job_id, lambda: (lambda j: j and j["state"] == "running" and any(
            v is not None and 0 < v < m for v, m in j["bars"]))(self.job(job_id)), 60)
        self.shot("large-running")
        label = self.job(job_id)["cancel"]
        if not label or "Cancel job" not in label:
            raise StepFailed("job %s has no Cancel button with a clear name (got %r)" % (job_id, label))
        self.click_job_button(job_id, "cancel")
        job = self.wait_state(job_id, ("cancelled", "succeeded", "failed"), 30)
        if job["state"] != "cancelled":
            raise StepFailed("the large job %s ended %s, not cancelled" % (job_id, job["state"]))
        if job["cancel"]:
            raise StepFailed("a cancelled job still shows Cancel")
        self.wait("the Re-publish button of job %s" % job_id, lambda: self.job(job_id)["republish"])
        self.shot("large-cancelled")
        post = job["post"]
        before = set(self.job_ids())
        self.click_job_button(job_id, "republish")
        new_id = self.new_job(before, 30)
        if self.job(new_id)["post"] != post:
            raise StepFailed("the re-published job %s is not for post %s" % (new_id, post))
        self.wait_state(new_id, ("queued", "running", "scheduled"), 10)
        self.wait("the Cancel button of job %s" % new_id, lambda: self.job(new_id)["cancel"])
        self.shot("republished")
        self.click_job_button(new_id, "cancel")
        job = self.wait_state(new_id, ("cancelled", "succeeded", "failed"), 30)
        if job["state"] != "cancelled":
            raise StepFailed("the re-published job %s ended %s, not cancelled" % (new_id, job["state"]))
        self.shot("republished-cancelled")

    def file_row(self):
        """State, note and bar value of the composer's first file row, or None."""
        return self.js("""
            const li = document.querySelector('#file-list li');
            return li && {state: li.dataset.state || '', note: li.querySelector('.note').textContent,
                          value: li.querySelector('progress').value};""")

    @staticmethod
    def api_requests(events):
        """The /v1/ requests in Network events, in order: method, path, Upload-Offset sent and answered, status or failure."""
        reqs = {}
        for m in events:
            prm = m["params"]
            if m["method"] == "Network.requestWillBeSent" and "/v1/" in prm["request"]["url"]:
                hdrs = {k.lower(): v for k, v in prm["request"]["headers"].items()}
                path = urllib.parse.urlsplit(prm["request"]["url"]).path
                reqs[prm["requestId"]] = {"method": prm["request"]["method"], "path": path, "offset": hdrs.get("upload-offset")}
            elif m["method"] == "Network.responseReceived" and prm["requestId"] in reqs:
                hdrs = {k.lower(): v for k, v in prm["response"]["headers"].items()}
                reqs[prm["requestId"]].update(status=prm["response"]["status"], reached=hdrs.get("upload-offset"),
                                              location=hdrs.get("location"))
            elif m["method"] == "Network.loadingFailed" and prm["requestId"] in reqs:
                reqs[prm["requestId"]]["failed"] = prm["errorText"]
        return list(reqs.values())

    def step_d_resumable(self):
        size = 20 * MIB + 12345  # the last PATCH is a short one
        data = big_png(size)
        p = os.path.join(self.out, "resumable.png")
        with open(p, "wb") as f:
            f.write(data)
        # Every change of the file row, kept by the page: the composer clears the row once the post is made.
        self.js("""
            window.fileLog = [];
            const list = document.getElementById('file-list');
            new MutationObserver(() => {
              const li = list.querySelector('li');
              if (!li) return;
              const s = {state: li.dataset.state || '', note: li.querySelector('.note').textContent,
                         value: li.querySelector('progress').value};
              const l = fileLog[fileLog.length - 1];
              if (!l || l.state !== s.state || l.note !== s.note || l.value !== s.value) fileLog.push(s);
            }).observe(list, {subtree: true, childList: true, characterData: true, attributes: true});
            performance.clearResourceTimings();""")
        self.network_log()  # what came before
        # Uploads slowed to about 4 MB/s: slow enough on loopback to cut the network in the middle of a PATCH.
        self.d.execute_cdp_cmd("Network.enable", {})
        self.d.execute_cdp_cmd("Network.emulateNetworkConditions",
                               {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 4_000_000})
        try:
            before = self.publish([p], "A 20 MiB file through tus, across a dropped connection")
            self.d.find_element(By.ID, "publish").click()
            # The second PATCH (8 to 16 MiB) half sent.
            self.wait("the upload to pass 12 MiB", lambda: ((self.file_row() or {}).get("value") or 0) > 12 * MIB, 60)
            self.relay.cut()
            cut = time.monotonic()
            self.wait("the file's note to say it resumes", lambda: "resuming" in (self.file_row() or {"note": ""})["note"], 30)
            self.shot("resuming")
            # Down until the page has asked how far the bytes reach, and failed: it keeps trying.
            events = []

            def head_failed():
                events.extend(self.network_log())
                return any(r["method"] == "HEAD" and r.get("failed") for r in self.api_requests(events))
            self.wait("a HEAD to fail while the network is down", head_failed, 30)
            self.relay.restore()
            job_id = self.new_job(before, 120)
            cut_to_post = time.monotonic() - cut
        finally:
            self.relay.restore()
            self.d.execute_cdp_cmd("Network.emulateNetworkConditions",
                                   {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        # The test store hangs on objects this large: the job runs with its upload half done, and is cancelled below.
        self.wait("job %s running with a partial upload bar" % job_id, lambda: (lambda j: j and j["state"] == "running" and any(
            v is not None and 0 < v < m for v, m in j["bars"]))(self.job(job_id)), 60)
        self.shot("resumable-running")

        order = self.api_requests(events + self.network_log())
        tus = [r for r in order if r["path"].startswith("/v1/uploads")]
        created = [r for r in tus if r["method"] == "POST" and r.get("status") == 201]
        if len(created) != 1 or not created[0].get("location"):
            raise StepFailed("not one upload created through POST /v1/uploads: %s" % tus)
        media_id = created[0]["location"].rsplit("/", 1)[-1]
        if any(r["method"] == "POST" and r["path"] == "/v1/media" for r in order):
            raise StepFailed("the 20 MiB file went through POST /v1/media: %s" % order)
        # The PATCH in flight at the cut failed; a HEAD then found the bytes of it that had arrived, and a PATCH sent
        # the rest from there.
        dropped = next((i for i, r in enumerate(tus) if r["method"] == "PATCH" and r.get("failed")), None)
        if dropped is None or tus[dropped]["offset"] != str(CHUNK):
            raise StepFailed("no PATCH from 8 MiB was dropped by the cut: %s" % tus)
        # (A HEAD may come before the server has counted the dropped body: it finds 8 MiB, and a later one finds more.)
        head = next((r for r in tus[dropped:] if r["method"] == "HEAD" and r.get("status") == 200
                     and CHUNK < int(r.get("reached") or 0) < 2 * CHUNK), None)
        if not head:
            raise StepFailed("no HEAD after the cut found part of the dropped PATCH: %s" % tus[dropped:])
        resumed = int(head["reached"])
        if not any(r["method"] == "PATCH" and r["offset"] == str(resumed) and r.get("status") == 204 for r in tus[dropped:]):
            raise StepFailed("no PATCH resumed from %d: %s" % (resumed, tus[dropped:]))
        done = [r["reached"] for r in tus if r["method"] == "PATCH" and r.get("status") == 204]
        if done[-1:] != [str(size)]:
            raise StepFailed("the last PATCH did not reach %d: %s" % (size, tus))
        timings = self.js("return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)")
        if "/v1/uploads" not in timings or "/v1/uploads/" + media_id not in timings:
            raise StepFailed("the resource timing entries show no tus upload: %s" % timings)
        if "/v1/media" in timings:
            raise StepFailed("the resource timing entries show a POST /v1/media: %s" % timings)

        # The file row: never failed, ends uploaded; its bar, once the HEAD told the page the server's offset, never
        # below it, and moving during the PATCH that resumed from it.
        log = self.js("return window.fileLog")
        states = [e["state"] for e in log]
        if "failed" in states or states[-1:] != ["uploaded"] or log[-1]["value"] != size:
            raise StepFailed("the file row did not end uploaded with a full bar: %s" % log[-5:])
        waited = next((i for i, e in enumerate(log) if "resuming" in e["note"]), len(log))
        told = next((i for i, e in enumerate(log) if i > waited and e["value"] == resumed), len(log))
        after = [e["value"] for e in log[told:]]
        if not after or min(after) < resumed or not any(resumed < v < resumed + CHUNK for v in after):
            raise StepFailed("the bar after the cut went below %d or did not move from there: %s" % (resumed, after))

        # What the server holds: the whole file, byte for byte, in the post the composer made.
        post = self.get("/v1/posts/%s" % self.job(job_id)["post"])
        if [m["id"] for m in post["media"]] != [media_id]:
            raise StepFailed("the post's media are %s, not the upload %s" % (post["media"], media_id))
        media = self.get("/v1/media/%s" % media_id)
        if (media["size"], media["sha256"], media["content_type"]) != (size, hashlib.sha256(data).hexdigest(), "image/png"):
            raise StepFailed("the media is not the file: %s" % media)
        self.figures.update({"resumable_bytes": size, "resumed_at": resumed, "cut_to_post_s": round(cut_to_post, 1)})

        self.click_job_button(job_id, "cancel")
        job = self.wait_state(job_id, ("cancelled", "succeeded", "failed"), 30)
        if job["state"] != "cancelled":
            raise StepFailed("the resumable job %s ended %s, not cancelled" % (job_id, job["state"]))
        self.wait("the live event stream again", lambda: self.js("return document.getElementById('conn').dataset.state") == "live")
        # The cut's own traces: the requests it broke, and the answers to the retries that followed it (409, 423).
        self.drain_console(lambda e: e.get("source") == "network" and self.page + "/v1/" in e["message"] and any(
            t in e["message"] for t in ("net::ERR_", "status of 409", "status of 423")))

    def step_e_queue(self):
        toggle = self.d.find_element(By.ID, "q-toggle")
        self.wait("the Pause queue button (admin)", lambda: toggle.is_displayed() and toggle.text == "Pause queue")
        toggle.click()
        self.wait("the queue to show paused", lambda: self.js(
            "const s = document.getElementById('q-state'); return s.dataset.paused === 'true' && s.textContent === 'Paused'"))
        self.wait("the Resume queue button", lambda: toggle.text == "Resume queue")
        self.shot("queue-paused")
        toggle.click()
        self.wait("the queue to show active", lambda: self.js(
            "const s = document.getElementById('q-state'); return s.dataset.paused === 'false' && s.textContent === 'Active'"))
        self.shot("queue-resumed")

    def step_f_figures(self):
        # A fresh load: empty cache, the key still in this tab's sessionStorage, so it signs in again.
        self.d.execute_cdp_cmd("Network.enable", {})
        self.d.execute_cdp_cmd("Network.clearBrowserCache", {})
        self.d.get(self.page + "/")
        self.wait("the live event stream after a reload", lambda: self.js(
            "return document.getElementById('conn').dataset.state") == "live")
        self.wait("the job list after a reload", lambda: len(self.job_ids()) > 0)
        fcp = self.wait("first-contentful-paint", lambda: self.js(
            "const e = performance.getEntriesByName('first-contentful-paint')[0]; return e ? e.startTime : null"))
        sizes = self.js("""
            const own = (n) => !new URL(n, location.href).pathname.startsWith('/v1/');
            const all = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')].filter(e => own(e.name));
            return {decoded: all.reduce((s, e) => s + e.decodedBodySize, 0), encoded: all.reduce((s, e) => s + e.encodedBodySize, 0),
                    files: all.map(e => [new URL(e.name).pathname, e.decodedBodySize])};""")
        # Settle: no request for 2 s in a row (the queue refresh after job events is debounced to 1 s).
        quiet_since = [time.monotonic()]

        def settled():
            if self.perf_requests():
                quiet_since[0] = time.monotonic()
            return time.monotonic() - quiet_since[0] >= 2
        self.wait("the page to settle", settled, 30)
        start = time.monotonic()
        time.sleep(IDLE_SECONDS)  # the measured idle window
        idle = self.perf_requests()
        self.figures.update({
            "page_bytes": sizes["decoded"],
            "page_bytes_encoded": sizes["encoded"],
            "page_files": len(sizes["files"]),
            "first_contentful_paint_ms": round(fcp, 1),
            "idle_window_s": round(time.monotonic() - start, 1),
            "idle_requests": len(idle),
        })
        self.shot("reloaded")
        if sizes["decoded"] >= PAGE_LIMIT:
            raise StepFailed("the page is %d bytes, not under %d: %s" % (sizes["decoded"], PAGE_LIMIT, sizes["files"]))
        if idle:
            raise StepFailed("%d requests in the %d s idle window: %s" % (len(idle), IDLE_SECONDS, idle))

    def step_g_phone_dark(self):
        self.viewport(390, 844)
        self.wait("the phone-size layout", lambda: self.js("return [innerWidth, innerHeight]") == [390, 844])
        overflow = self.js("return document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 0:
            raise StepFailed("the page scrolls sideways by %d px at 390 px wide" % overflow)
        self.shot("phone")
        self.js("document.getElementById('job-list').scrollIntoView()")
        self.shot("phone-jobs", top=False)
        self.d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        self.wait("dark mode", lambda: self.js("return matchMedia('(prefers-color-scheme: dark)').matches"))
        bg = self.js("""const m = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number);
                        return (m[0] + m[1] + m[2]) / 3;""")
        if bg > 80:
            raise StepFailed("dark mode does not darken the page (background level %d)" % bg)
        self.shot("phone-dark")
        self.viewport(1280, 900)
        self.wait("the wide layout", lambda: self.js("return [innerWidth, innerHeight]") == [1280, 900])
        self.shot("dark")
        self.d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    # running -----------------------------------------------------------------------------------

    def cleanup(self):
        """Cancels any job this run created that is not done (best effort, over the API)."""
        for job_id in self.created_jobs:
            try:
                req = urllib.request.Request("%s/v1/jobs/%s" % (self.base, job_id), headers={"Authorization": "Bearer " + self.args.key})
                with urllib.request.urlopen(req, timeout=5) as r:
                    if json.load(r).get("done"):
                        continue
                req = urllib.request.Request("%s/v1/jobs/%s/cancel" % (self.base, job_id), method="POST",
                                             headers={"Authorization": "Bearer " + self.args.key})
                urllib.request.urlopen(req, timeout=5).close()
            except OSError:
                pass

    def run(self):
        steps = [("a: sign in", self.step_a_sign_in), ("b: two small images", self.step_b_small),
                 ("c: large image, cancel, re-publish", self.step_c_large),
                 ("d: resumable upload across a dropped connection", self.step_d_resumable),
                 ("e: pause and resume", self.step_e_queue), ("f: figures", self.step_f_figures),
                 ("g: phone and dark mode", self.step_g_phone_dark)]
        for name, fn in steps:
            try:
                fn()
                self.drain_console()
            except (StepFailed, WebDriverException) as e:
                try:
                    self.shot("failed")
                    self.drain_console()
                except WebDriverException:
                    pass
                msg = e.msg if isinstance(e, WebDriverException) else str(e)
                if self.console:
                    msg += "; browser console entries: %s" % self.console
                raise StepFailed("step %s failed: %s" % (name, msg)) from None
            if self.console:
                raise StepFailed("step %s: browser console entries: %s" % (name, self.console))
        return self.figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="Herald's base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--key", required=True, help="an admin API key (hrld_...)")
    ap.add_argument("--out", required=True, help="directory for screenshots and results.json")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    run = None
    try:
        run = Run(args)
        figures = run.run()
    except StepFailed as e:
        print("dashboard test FAILED: %s" % e, file=sys.stderr)
        return 1
    except WebDriverException as e:
        print("dashboard test FAILED: the browser could not start or crashed: %s" % e.msg, file=sys.stderr)
        return 1
    finally:
        if run is not None:
            run.cleanup()
            try:
                run.d.quit()
            except WebDriverException:
                pass
    line = json.dumps(figures, sort_keys=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        f.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
