// Atelier playground: sends the forms to /v1 with the session cookie and the CSRF header.
"use strict";
(function () {
  const config = JSON.parse(document.getElementById("playground-config").textContent);
  // The page's messages in its language (common.js).
  const t = window.atelier.t;
  const ACCEPTED = ["image/png", "image/jpeg", "image/webp"];

  // ---- tabs (arrow keys move between them) ----
  const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
  function selectTab(tab, focus = true) {
    for (const t of tabs) {
      const selected = t === tab;
      t.setAttribute("aria-selected", String(selected));
      t.tabIndex = selected ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !selected;
    }
    if (focus) tab.focus();
  }
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => selectTab(tab));
    tab.addEventListener("keydown", (e) => {
      if (e.key === "ArrowRight") selectTab(tabs[(i + 1) % tabs.length]);
      if (e.key === "ArrowLeft") selectTab(tabs[(i - 1 + tabs.length) % tabs.length]);
    });
  });

  // ---- model → sizes and qualities ----
  for (const form of document.querySelectorAll("#generate-form, #edit-form")) {
    const modelSelect = form.querySelector("[data-model-select]");
    if (!modelSelect) continue;
    const fill = (select, values, preferred) => {
      const keep = select.value;
      select.replaceChildren(...values.map((v) => new Option(v, v)));
      select.value = values.includes(keep) ? keep : values.includes(preferred) ? preferred : values[0];
    };
    modelSelect.addEventListener("change", () => {
      const m = config.models.find((x) => x.id === modelSelect.value);
      if (!m) return;
      fill(form.querySelector("[data-size-select]"), m.sizes, "1024x1024");
      fill(form.querySelector("[data-quality-select]"), m.qualities, "auto");
      // The submit button names this model's price (the server wrote it on the option).
      const label = modelSelect.selectedOptions[0]?.dataset.submitLabel;
      if (label) form.querySelector("button[type=submit]").textContent = label;
      // Edit tab: a model whose edits keep the image's size gets a note instead of a Size it would ignore.
      const kept = form.querySelector("[data-size-kept]");
      if (kept) {
        kept.hidden = !m.editKeepsSize;
        form.querySelector("[data-size-field]").hidden = m.editKeepsSize;
      }
    });
  }

  // ---- image checks: the same limits as the API (type by signature, size) ----
  async function sniff(file) {
    const b = new Uint8Array(await file.slice(0, 12).arrayBuffer());
    if (b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47) return "image/png";
    if (b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return "image/jpeg";
    if (b[0] === 0x52 && b[1] === 0x49 && b[2] === 0x46 && b[3] === 0x46 && b[8] === 0x57 && b[9] === 0x45 && b[10] === 0x42 && b[11] === 0x50) return "image/webp";
    return null;
  }
  async function checkImage(file) {
    if (file.size > config.maxBytes) return t("playground.tooBig", { name: file.name });
    const type = await sniff(file);
    if (!type || !ACCEPTED.includes(type)) return t("playground.notImage", { name: file.name });
    return null;
  }
  const readDataUrl = (blob) =>
    new Promise((resolve, reject) => {
      const r = new FileReader();
      r.onload = () => resolve(r.result);
      r.onerror = () => reject(r.error);
      r.readAsDataURL(blob);
    });

  function showError(el, text) {
    el.textContent = text || "";
    el.hidden = !text;
  }

  // ---- results ----
  const blobOf = (b64, format) =>
    new Blob([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], { type: `image/${format === "jpg" ? "jpeg" : format || "png"}` });

  function resultView(id) {
    const root = document.getElementById(id);
    const q = (s) => root.querySelector(s);
    const progress = q("[data-progress]");
    const cancel = q("[data-cancel]");
    let lastUrl = null;
    let previewUrl = null;
    let announced = "";
    let onCancel = null;
    cancel.addEventListener("click", () => { if (onCancel) onCancel(); });
    /** The live region hears only coarse changes (a new state, a queue move, a quarter of progress). */
    function announce(text) {
      if (text === announced) return;
      announced = text;
      q("[data-announce]").textContent = text;
    }
    function hidePreview() {
      q("[data-preview]").hidden = true;
      if (previewUrl) { URL.revokeObjectURL(previewUrl); previewUrl = null; }
    }
    /**
     * The result sits under the form, below the fold on a laptop: once the image has its size,
     * scroll just enough that the picture and its Download link are on screen.
     */
    function revealResult() {
      const figure = q("[data-figure]");
      const img = q("[data-image]");
      const scroll = () => figure.scrollIntoView({ block: "nearest" });
      img.decode().then(scroll, scroll);
    }
    return {
      busy(on) {
        q("[data-busy]").hidden = !on;
        if (on) {
          // A new request replaces the previous outcome, so an old image never sits under a new error.
          showError(q("[data-error]"), "");
          q("[data-figure]").hidden = true;
          hidePreview();
          this.status(t("playground.starting"), null);
          announced = "";
          q("[data-busy]").scrollIntoView({ block: "nearest" });
        } else {
          this.cancelable(null);
        }
      },
      /** The visible status line and the progress bar: a fraction 0..1, or null for "unknown". */
      status(text, fraction) {
        q("[data-status]").textContent = text;
        if (typeof fraction === "number") progress.value = Math.round(fraction * 100);
        else progress.removeAttribute("value"); // indeterminate
      },
      /** A task object from the API: queued (with its place) or running (with its progress). */
      task(task) {
        if (task.status === "queued") {
          const place = typeof task.queue_position === "number";
          this.status(place ? t("playground.queuedAt", { position: task.queue_position }) : t("playground.queued"), null);
          announce(place ? t("playground.announceQueuedAt", { position: task.queue_position }) : t("playground.announceQueued"));
        } else if (task.status === "running") {
          if (typeof task.progress === "number") {
            const pct = Math.round(task.progress * 100);
            this.status(t("playground.runningPct", { pct }), task.progress);
            announce(t("playground.announceRunningPct", { pct: Math.floor(task.progress * 4) * 25 }));
          } else {
            this.status(t("playground.running"), null);
            announce(t("playground.announceRunning"));
          }
        }
      },
      /** A partial image from the stream replaces the previous one. */
      partial(event, n, total) {
        if (!event.b64_json) return;
        const url = URL.createObjectURL(blobOf(event.b64_json, event.output_format));
        if (previewUrl) URL.revokeObjectURL(previewUrl);
        previewUrl = url;
        const img = q("[data-partial]");
        img.src = url;
        img.alt = t("playground.previewAlt", { n, total });
        q("[data-preview-caption]").textContent = t("playground.previewCaption", { n, total }) + (event.size ? ` · ${event.size}` : "");
        q("[data-preview]").hidden = false;
        this.status(t("playground.receiving", { n, total }), n / (total + 1));
        announce(t("playground.announcePreview", { n, total }));
      },
      cancelable(fn) {
        onCancel = fn;
        cancel.hidden = !fn;
        cancel.disabled = false;
      },
      cancelPending() { cancel.disabled = true; this.status(t("playground.canceling"), null); },
      /** The outcome that is not an image: an error, or a calmer notice (a cancel the user asked for). */
      error(text, tone) {
        const el = q("[data-error]");
        el.className = `msg ${tone === "notice" ? "notice" : "error"}`;
        showError(el, text);
        hidePreview();
      },
      async image(body, started) {
        const item = body.data && body.data[0];
        if (!item || !item.b64_json) throw new Error(t("playground.noImage"));
        const format = body.output_format || "png";
        if (lastUrl) URL.revokeObjectURL(lastUrl);
        lastUrl = URL.createObjectURL(blobOf(item.b64_json, format));
        q("[data-image]").src = lastUrl;
        const dl = q("[data-download]");
        dl.href = lastUrl;
        dl.download = `atelier-${Date.now()}.${format}`;
        // The balance is refreshed before the result is revealed, so the two never disagree on screen.
        const credits = await window.atelier.refreshBalance();
        const gen = typeof body.generation_time_ms === "number" ? body.generation_time_ms : Math.round(performance.now() - started);
        q("[data-meta]").textContent =
          t("playground.generatedIn", { seconds: (gen / 1000).toFixed(2) }) + (body.size ? ` · ${body.size}` : "") + (credits === null ? "" : ` · ${window.atelier.plural("playground.creditsLeft", credits)}`);
        hidePreview();
        q("[data-figure]").hidden = false;
        revealResult();
        announce(t("playground.ready"));
      },
    };
  }

  /** The API's refusal as an Error with the page's own words (and the status, for the caller). */
  function apiError(status, body) {
    const code = body && body.error ? body.error.code : null;
    let message;
    // The API's own words for these two speak of API keys and headers, which mean nothing here.
    if (status === 401) message = t("playground.sessionEnded");
    else if (code === "csrf_token_invalid") message = t("playground.staleSession");
    // The API answers in English (clients parse it); the two refusals a person meets most get the page's words.
    else if (status === 402) message = t("playground.noCredits");
    else if (status === 429) message = t("playground.tooMany");
    else message = body && body.error && body.error.message ? body.error.message : t("playground.serverAnswered", { status });
    const err = new Error(message);
    err.status = status;
    err.code = code;
    return err;
  }

  async function send(path, init) {
    const headers = Object.assign({ "x-csrf-token": window.atelier.csrf }, init.headers || {});
    try {
      return await fetch(path, Object.assign({}, init, { headers, credentials: "same-origin" }));
    } catch {
      const err = new Error(t("playground.unreachable"));
      err.network = true;
      throw err;
    }
  }

  async function callApi(path, init) {
    const res = await send(path, init);
    let body = null;
    try { body = await res.json(); } catch { /* not JSON */ }
    if (!res.ok) throw apiError(res.status, body);
    return body;
  }

  /**
   * Server-sent events from a fetch body: events end at a blank line; `event:` names one,
   * `data:` lines are joined; comment lines (the keep-alive) are skipped.
   */
  async function* serverEvents(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let searched = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      // Search only the new text (and the newline before it) for the end of an event.
      while ((end = buffer.indexOf("\n\n", Math.max(0, searched - 1))) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        searched = 0;
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line === "" || line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let v = colon < 0 ? "" : line.slice(colon + 1);
          if (v.startsWith(" ")) v = v.slice(1);
          if (field === "event") event = v;
          else if (field === "data") data.push(v);
        }
        if (data.length > 0) yield { event, data: data.join("\n") };
      }
      searched = buffer.length;
    }
  }

  // ---- the running request: remembered for this tab, so that a reload reattaches to it ----
  // Under the user's own key (atelier.playground.task.<user id>): another user signed in in the
  // same tab never gets this one's form (its prompt) put back.
  const TASK_KEY = config.taskStorageKey;
  const PARTIAL_IMAGES = 2;
  const POLL_MS = 1000;
  function rememberedTask() {
    try {
      const t = JSON.parse(sessionStorage.getItem(TASK_KEY) || "null");
      return t && typeof t.id === "string" && (t.panel === "gen" || t.panel === "edit") ? t : null;
    } catch { return null; }
  }
  function rememberTask(task) {
    try { sessionStorage.setItem(TASK_KEY, JSON.stringify(task)); } catch { /* storage off: no reattach */ }
  }
  function forgetTask(id) {
    try { const t = rememberedTask(); if (!t || t.id === id) sessionStorage.removeItem(TASK_KEY); } catch { /* storage off */ }
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  /**
   * Runs one panel's image requests: streamed (previews as they arrive, then the image) or as a
   * background task (polled: queue position, progress, Cancel); either way the task id is kept
   * until the outcome is shown, and `reattach` follows a remembered one after a reload.
   */
  function imageRunner(panel, view, form) {
    const button = form.querySelector('button[type="submit"]');
    const FIELDS = ["prompt", "model", "size", "quality"];
    /** The form as sent, kept with the task so that a reload shows what is running. */
    const snapshot = () => Object.fromEntries(FIELDS.map((f) => [f, form.elements[f].value]).concat([["background", form.elements.background.checked]]));
    function restore(saved) {
      if (!saved || typeof saved !== "object") return;
      const set = (name) => {
        const el = form.elements[name];
        if (typeof saved[name] === "string" && (el.tagName !== "SELECT" || Array.from(el.options).some((o) => o.value === saved[name]))) el.value = saved[name];
      };
      set("model");
      form.elements.model.dispatchEvent(new Event("change")); // the model's sizes and qualities
      for (const f of ["prompt", "size", "quality"]) set(f);
      form.elements.background.checked = saved.background === true;
    }
    /** Polls the task until it ends; shows the image or throws its error. */
    async function follow(id, started, cancelable) {
      if (cancelable) {
        view.cancelable(async () => {
          view.cancelPending();
          try { await callApi(`/v1/images/tasks/${encodeURIComponent(id)}/cancel`, { method: "POST" }); }
          catch (err) { if (err.code !== "task_not_cancelable") view.error(err.message); }
        });
      }
      let misses = 0;
      for (;;) {
        let task;
        try {
          task = await callApi(`/v1/images/tasks/${encodeURIComponent(id)}`, { method: "GET" });
          misses = 0;
        } catch (err) {
          if (err.status === 404) { forgetTask(id); throw new Error(t("playground.expired")); }
          if (err.status === 401 || err.status === 403) { forgetTask(id); throw err; }
          // A dropped connection or a busy server: keep trying for a while.
          if (++misses >= 30) throw err;
          view.status(t("playground.reconnecting"), null);
          await sleep(POLL_MS * 2);
          continue;
        }
        if (task.status === "succeeded") {
          await view.image(task.result, started);
          forgetTask(id);
          return;
        }
        if (task.status === "failed" || task.status === "canceled") {
          forgetTask(id);
          const why = task.error && task.error.message ? task.error.message : "";
          if (task.status !== "canceled") throw new Error(why || t("playground.failedRefunded"));
          const canceled = new Error(t("playground.canceled"));
          canceled.tone = "notice";
          throw canceled;
        }
        view.task(task);
        await sleep(POLL_MS);
      }
    }

    async function streamed(path, init, started) {
      const res = await send(path, init);
      if (!res.ok) {
        let body = null;
        try { body = await res.json(); } catch { /* not JSON */ }
        throw apiError(res.status, body);
      }
      if (!(res.headers.get("content-type") || "").includes("text/event-stream")) return view.image(await res.json(), started);
      const id = res.headers.get("x-request-id");
      if (id) rememberTask({ id, panel, mode: "stream", form: snapshot(), startedAt: Date.now() - (performance.now() - started) });
      view.status(t("playground.running"), null);
      let shown = 0;
      let failure = null;
      try {
        for await (const ev of serverEvents(res.body)) {
          let data;
          try { data = JSON.parse(ev.data); } catch { continue; }
          if (ev.event.endsWith(".partial_image")) view.partial(data, ++shown, PARTIAL_IMAGES);
          else if (ev.event.endsWith(".completed")) {
            await view.image({ data: [{ b64_json: data.b64_json }], output_format: data.output_format, size: data.size, generation_time_ms: data.generation_time_ms }, started);
            if (id) forgetTask(id);
            return;
          } else if (ev.event === "error") {
            failure = new Error(data.error && data.error.message ? data.error.message : t("playground.failed"));
            break;
          }
        }
      } catch {
        // The connection dropped: the generation goes on on the server; follow it below.
      }
      if (failure) { if (id) forgetTask(id); throw failure; }
      if (!id) throw new Error(t("playground.lost"));
      await follow(id, started, false);
    }

    async function background(path, init, started) {
      const headers = Object.assign({}, init.headers || {}, { prefer: "respond-async" });
      const task = await callApi(path, Object.assign({}, init, { headers }));
      if (!task || task.object !== "image.task") return view.image(task, started); // answered at once
      rememberTask({ id: task.id, panel, mode: "async", form: snapshot(), startedAt: Date.now() - (performance.now() - started) });
      view.task(task);
      await follow(task.id, started, true);
    }

    async function run(work, returnFocus) {
      button.disabled = true; // a disabled button loses focus: keepFocus() gives it back
      view.busy(true);
      try {
        await work();
      } catch (err) {
        view.error(err.message, err.tone);
        window.atelier.refreshBalance();
      } finally {
        view.busy(false);
        if (returnFocus) keepFocus(button);
        else button.disabled = false;
      }
    }

    return {
      /** Sends the request; `init` is the fetch init of the synchronous request. */
      submit(path, init, inBackground) {
        const started = performance.now();
        return run(() => (inBackground ? background(path, init, started) : streamed(path, init, started)), true);
      },
      reattach(task) {
        const started = performance.now() - Math.max(0, Date.now() - (Number(task.startedAt) || Date.now()));
        restore(task.form);
        return run(async () => {
          view.status(t("playground.reattaching"), null);
          await follow(task.id, started, task.mode === "async");
        }, false);
      },
    };
  }

  // ---- generate ----
  const gen = document.getElementById("generate-form");
  const refs = [];
  const refList = gen.querySelector("[data-ref-list]");
  const genError = gen.querySelector("[data-form-error]");
  function renderRefs() {
    refList.replaceChildren(
      ...refs.map((r, i) => {
        const li = document.createElement("li");
        const img = document.createElement("img");
        img.src = r.url;
        img.alt = t("playground.referenceAlt", { n: i + 1, name: r.file.name });
        const remove = document.createElement("button");
        remove.type = "button";
        remove.textContent = "×";
        remove.setAttribute("aria-label", t("playground.remove", { name: r.file.name }));
        remove.addEventListener("click", () => { URL.revokeObjectURL(r.url); refs.splice(i, 1); renderRefs(); });
        li.append(img, remove);
        return li;
      }),
    );
  }
  async function addRefs(files) {
    const problems = [];
    for (const file of files) {
      if (refs.length >= config.maxReferences) { problems.push(t("playground.tooManyRefs", { max: config.maxReferences })); break; }
      const problem = await checkImage(file);
      if (problem) problems.push(problem);
      else refs.push({ file, url: URL.createObjectURL(file) });
    }
    showError(genError, problems.join(" "));
    renderRefs();
  }
  const refInput = gen.querySelector("[data-ref-input]");
  refInput.addEventListener("change", () => { addRefs(Array.from(refInput.files)); refInput.value = ""; });
  const zone = gen.querySelector("[data-dropzone]");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => { e.preventDefault(); zone.classList.remove("over"); addRefs(Array.from(e.dataTransfer.files)); });

  /**
   * Re-enables a submit button that was disabled during a request. Disabling drops the keyboard
   * focus to <body>; when nothing else took it meanwhile, it goes back to the button, so a
   * keyboard user is still where they pressed Enter.
   */
  function keepFocus(button) {
    button.disabled = false;
    if (!document.activeElement || document.activeElement === document.body) button.focus();
  }

  const genRunner = imageRunner("gen", resultView("gen-result"), gen);
  gen.addEventListener("submit", async (e) => {
    e.preventDefault();
    const prompt = gen.elements.prompt.value.trim();
    if (!prompt) { showError(genError, t("playground.writePrompt")); gen.elements.prompt.focus(); return; }
    showError(genError, "");
    const inBackground = gen.elements.background.checked;
    const body = { prompt, model: gen.elements.model.value, size: gen.elements.size.value, quality: gen.elements.quality.value, response_format: "b64_json" };
    if (!inBackground) Object.assign(body, { stream: true, partial_images: PARTIAL_IMAGES });
    let references = [];
    try { if (refs.length > 0) references = await Promise.all(refs.map((r) => readDataUrl(r.file))); }
    catch { showError(genError, t("playground.refUnreadable")); return; }
    if (references.length > 0) body.reference_images = references;
    await genRunner.submit("/v1/images/generations", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }, inBackground);
  });

  // ---- edit: image + painted or uploaded mask ----
  const edit = document.getElementById("edit-form");
  const editError = edit.querySelector("[data-form-error]");
  const editor = edit.querySelector("[data-mask-editor]");
  const preview = edit.querySelector("[data-preview]");
  const maskCanvas = edit.querySelector("[data-mask]");
  const brush = edit.querySelector("[data-brush]");
  let editFile = null;
  let painted = false;

  edit.querySelector("[data-edit-image]").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    editFile = null;
    editor.hidden = true;
    if (!file) return;
    const problem = await checkImage(file);
    if (problem) { showError(editError, problem); return; }
    showError(editError, "");
    const bitmap = await createImageBitmap(file).catch(() => null);
    if (!bitmap) { showError(editError, t("playground.unreadable", { name: file.name })); return; }
    editFile = file;
    for (const c of [preview, maskCanvas]) { c.width = bitmap.width; c.height = bitmap.height; }
    // Small images are shown larger so that painting the mask stays easy.
    preview.style.width = `${Math.max(bitmap.width, Math.min(384, bitmap.width * 4))}px`;
    preview.getContext("2d").drawImage(bitmap, 0, 0);
    maskCanvas.getContext("2d").clearRect(0, 0, maskCanvas.width, maskCanvas.height);
    painted = false;
    editor.hidden = false;
  });

  // Strokes are painted opaque on the mask layer (the layer itself is translucent in CSS),
  // as round-capped lines between pointer positions so fast moves leave no gaps.
  let last = null;
  function point(e) {
    const rect = maskCanvas.getBoundingClientRect();
    return {
      x: ((e.clientX - rect.left) / rect.width) * maskCanvas.width,
      y: ((e.clientY - rect.top) / rect.height) * maskCanvas.height,
      r: Math.max(1, ((Number(brush.value) / rect.width) * maskCanvas.width) / 2),
    };
  }
  function paint(e) {
    const p = point(e);
    const ctx = maskCanvas.getContext("2d");
    ctx.strokeStyle = ctx.fillStyle = "#ff3b3b";
    ctx.lineCap = "round";
    ctx.lineWidth = p.r * 2;
    ctx.beginPath();
    if (last) {
      ctx.moveTo(last.x, last.y);
      ctx.lineTo(p.x, p.y);
      ctx.stroke();
    } else {
      ctx.arc(p.x, p.y, p.r, 0, Math.PI * 2);
      ctx.fill();
    }
    last = p;
    painted = true;
  }
  maskCanvas.addEventListener("pointerdown", (e) => { last = null; maskCanvas.setPointerCapture(e.pointerId); paint(e); });
  maskCanvas.addEventListener("pointermove", (e) => { if (maskCanvas.hasPointerCapture(e.pointerId)) paint(e); });
  maskCanvas.addEventListener("pointerup", () => { last = null; });
  edit.querySelector("[data-clear-mask]").addEventListener("click", () => {
    maskCanvas.getContext("2d").clearRect(0, 0, maskCanvas.width, maskCanvas.height);
    painted = false;
  });

  /** The API's mask: opaque where the image stays, transparent where it was painted. */
  function paintedMask() {
    const out = document.createElement("canvas");
    out.width = maskCanvas.width;
    out.height = maskCanvas.height;
    const ctx = out.getContext("2d");
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, out.width, out.height);
    ctx.globalCompositeOperation = "destination-out";
    ctx.drawImage(maskCanvas, 0, 0);
    // The painted strokes are translucent; make every touched pixel fully transparent.
    const data = ctx.getImageData(0, 0, out.width, out.height);
    for (let i = 3; i < data.data.length; i += 4) if (data.data[i] < 255) data.data[i] = 0;
    ctx.globalCompositeOperation = "source-over";
    ctx.putImageData(data, 0, 0);
    return new Promise((resolve) => out.toBlob(resolve, "image/png"));
  }

  const editRunner = imageRunner("edit", resultView("edit-result"), edit);
  edit.addEventListener("submit", async (e) => {
    e.preventDefault();
    const prompt = edit.elements.prompt.value.trim();
    if (!editFile) { showError(editError, t("playground.chooseImage")); return; }
    if (!prompt) { showError(editError, t("playground.writePrompt")); edit.elements.prompt.focus(); return; }
    const maskFile = edit.querySelector("[data-mask-file]").files[0];
    if (maskFile) {
      const problem = maskFile.size > config.maxBytes ? t("playground.maskTooBig") : (await sniff(maskFile)) !== "image/png" ? t("playground.maskNotPng") : null;
      if (problem) { showError(editError, problem); return; }
    }
    showError(editError, "");
    const inBackground = edit.elements.background.checked;
    const form = new FormData();
    form.append("image", editFile, editFile.name);
    if (maskFile) form.append("mask", maskFile, maskFile.name);
    else if (painted) form.append("mask", await paintedMask(), "mask.png");
    form.append("prompt", prompt);
    form.append("model", edit.elements.model.value);
    if (!edit.querySelector("[data-size-field]").hidden) form.append("size", edit.elements.size.value);
    form.append("quality", edit.elements.quality.value);
    form.append("response_format", "b64_json");
    if (!inBackground) { form.append("stream", "true"); form.append("partial_images", String(PARTIAL_IMAGES)); }
    await editRunner.submit("/v1/images/edits", { method: "POST", body: form }, inBackground);
  });

  // ---- a request still running when the page was (re)loaded: follow it ----
  const running = rememberedTask();
  if (running) {
    if (running.panel === "edit") selectTab(document.getElementById("tab-edit"), false);
    (running.panel === "edit" ? editRunner : genRunner).reattach(running);
  }

  // ---- chat ----
  const chat = document.getElementById("chat-form");
  const log = chat.querySelector("[data-chat-log]");
  const chatError = chat.querySelector("[data-form-error]");
  // The conversation survives a reload: kept in this tab's sessionStorage under a key with the
  // user's id (another account signed in later in the tab starts empty; sign-out clears it).
  const CHAT_KEY = config.chatStorageKey;
  let messages = [];
  function saveConversation() {
    try {
      if (messages.length === 0) sessionStorage.removeItem(CHAT_KEY);
      else sessionStorage.setItem(CHAT_KEY, JSON.stringify({ model: chat.elements.model.value, messages }));
    } catch { /* storage off or full: the conversation lives as long as the page */ }
  }
  function savedConversation() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(CHAT_KEY) || "null");
      const ok = saved && Array.isArray(saved.messages) &&
        saved.messages.every((m) => m && (m.role === "user" || m.role === "assistant") && typeof m.content === "string");
      return ok ? saved : null;
    } catch {
      return null;
    }
  }
  function addMessage(role, content) {
    const li = document.createElement("li");
    li.className = role;
    li.textContent = content; // text, never markup
    li.setAttribute("aria-label", role === "user" ? t("playground.you") : t("playground.assistant"));
    log.append(li);
  }
  chat.elements.message.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); chat.requestSubmit(); }
  });
  chat.querySelector("[data-chat-reset]").addEventListener("click", () => { messages = []; log.replaceChildren(); showError(chatError, ""); saveConversation(); });
  const saved = savedConversation();
  if (saved) {
    messages = saved.messages;
    for (const m of messages) addMessage(m.role, m.content);
    if (Array.from(chat.elements.model.options).some((o) => o.value === saved.model)) chat.elements.model.value = saved.model;
  }
  chat.addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = chat.elements.message.value.trim();
    if (!text) { showError(chatError, t("playground.writeMessage")); return; }
    showError(chatError, "");
    const button = chat.querySelector('button[type="submit"]');
    button.disabled = true; // a disabled button loses focus: keepFocus() gives it back
    messages.push({ role: "user", content: text });
    addMessage("user", text);
    chat.elements.message.value = "";
    try {
      const answer = await callApi("/v1/chat/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: chat.elements.model.value, messages }),
      });
      const reply = answer.choices && answer.choices[0] && answer.choices[0].message ? answer.choices[0].message.content || "" : "";
      messages.push({ role: "assistant", content: reply });
      addMessage("assistant", reply);
      saveConversation();
    } catch (err) {
      messages.pop();
      log.lastElementChild && log.lastElementChild.remove();
      chat.elements.message.value = text;
      showError(chatError, err.message);
    } finally {
      keepFocus(button);
    }
  });
})();
