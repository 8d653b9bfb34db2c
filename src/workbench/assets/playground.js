// Atelier playground: sends the forms to /v1 with the session cookie and the CSRF header.
"use strict";
(function () {
  const config = JSON.parse(document.getElementById("playground-config").textContent);
  const ACCEPTED = ["image/png", "image/jpeg", "image/webp"];

  // ---- tabs (arrow keys move between them) ----
  const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
  function selectTab(tab) {
    for (const t of tabs) {
      const selected = t === tab;
      t.setAttribute("aria-selected", String(selected));
      t.tabIndex = selected ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !selected;
    }
    tab.focus();
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
    if (file.size > config.maxBytes) return `${file.name} is larger than 10 MiB.`;
    const type = await sniff(file);
    if (!type || !ACCEPTED.includes(type)) return `${file.name} is not a PNG, JPEG or WebP image.`;
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
  function resultView(id) {
    const root = document.getElementById(id);
    const q = (s) => root.querySelector(s);
    let lastUrl = null;
    return {
      busy(on) {
        q("[data-busy]").hidden = !on;
        // A new request replaces the previous outcome, so an old image never sits under a new error.
        if (on) { showError(q("[data-error]"), ""); q("[data-figure]").hidden = true; }
      },
      error(text) { showError(q("[data-error]"), text); },
      async image(body, started) {
        const item = body.data && body.data[0];
        if (!item || !item.b64_json) throw new Error("The response contained no image.");
        const format = body.output_format || "png";
        const bytes = Uint8Array.from(atob(item.b64_json), (c) => c.charCodeAt(0));
        const blob = new Blob([bytes], { type: `image/${format === "jpg" ? "jpeg" : format}` });
        if (lastUrl) URL.revokeObjectURL(lastUrl);
        lastUrl = URL.createObjectURL(blob);
        q("[data-image]").src = lastUrl;
        const dl = q("[data-download]");
        dl.href = lastUrl;
        dl.download = `atelier-${Date.now()}.${format}`;
        // The balance is refreshed before the result is revealed, so the two never disagree on screen.
        const credits = await window.atelier.refreshBalance();
        const gen = typeof body.generation_time_ms === "number" ? body.generation_time_ms : Math.round(performance.now() - started);
        q("[data-meta]").textContent =
          `Generated in ${(gen / 1000).toFixed(2)} s` + (body.size ? ` · ${body.size}` : "") + (credits === null ? "" : ` · ${credits} ${credits === 1 ? "credit" : "credits"} left`);
        q("[data-figure]").hidden = false;
      },
    };
  }

  async function callApi(path, init) {
    const headers = Object.assign({ "x-csrf-token": window.atelier.csrf }, init.headers || {});
    let res;
    try {
      res = await fetch(path, Object.assign({}, init, { headers, credentials: "same-origin" }));
    } catch {
      throw new Error("Could not reach the server. Check your connection and try again.");
    }
    let body = null;
    try { body = await res.json(); } catch { /* not JSON */ }
    if (!res.ok) {
      const code = body && body.error ? body.error.code : null;
      // The API's own words for these two speak of API keys and headers, which mean nothing here.
      if (res.status === 401) throw new Error("Your session has ended. Sign in again, then come back to the playground.");
      if (code === "csrf_token_invalid") throw new Error("This page belongs to an earlier session. Reload it and try again.");
      const msg = body && body.error && body.error.message ? body.error.message : `The server answered ${res.status}.`;
      throw new Error(msg);
    }
    return body;
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
        img.alt = `Reference ${i + 1}: ${r.file.name}`;
        const remove = document.createElement("button");
        remove.type = "button";
        remove.textContent = "×";
        remove.setAttribute("aria-label", `Remove ${r.file.name}`);
        remove.addEventListener("click", () => { URL.revokeObjectURL(r.url); refs.splice(i, 1); renderRefs(); });
        li.append(img, remove);
        return li;
      }),
    );
  }
  async function addRefs(files) {
    const problems = [];
    for (const file of files) {
      if (refs.length >= config.maxReferences) { problems.push(`At most ${config.maxReferences} reference images.`); break; }
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

  const genResult = resultView("gen-result");
  gen.addEventListener("submit", async (e) => {
    e.preventDefault();
    const prompt = gen.elements.prompt.value.trim();
    if (!prompt) { showError(genError, "Write a prompt first."); gen.elements.prompt.focus(); return; }
    showError(genError, "");
    const button = gen.querySelector('button[type="submit"]');
    button.disabled = true; // a disabled button loses focus: keepFocus() gives it back
    genResult.busy(true);
    const started = performance.now();
    try {
      const body = { prompt, model: gen.elements.model.value, size: gen.elements.size.value, quality: gen.elements.quality.value, response_format: "b64_json" };
      if (refs.length > 0) body.reference_images = await Promise.all(refs.map((r) => readDataUrl(r.file)));
      const answer = await callApi("/v1/images/generations", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      await genResult.image(answer, started);
    } catch (err) {
      genResult.error(err.message);
      window.atelier.refreshBalance();
    } finally {
      genResult.busy(false);
      keepFocus(button);
    }
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
    if (!bitmap) { showError(editError, `${file.name} could not be read as an image.`); return; }
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

  const editResult = resultView("edit-result");
  edit.addEventListener("submit", async (e) => {
    e.preventDefault();
    const prompt = edit.elements.prompt.value.trim();
    if (!editFile) { showError(editError, "Choose an image to edit."); return; }
    if (!prompt) { showError(editError, "Write a prompt first."); edit.elements.prompt.focus(); return; }
    const maskFile = edit.querySelector("[data-mask-file]").files[0];
    if (maskFile) {
      const problem = maskFile.size > config.maxBytes ? "The mask is larger than 10 MiB." : (await sniff(maskFile)) !== "image/png" ? "The mask must be a PNG with transparency." : null;
      if (problem) { showError(editError, problem); return; }
    }
    showError(editError, "");
    const button = edit.querySelector('button[type="submit"]');
    button.disabled = true; // a disabled button loses focus: keepFocus() gives it back
    editResult.busy(true);
    const started = performance.now();
    try {
      const form = new FormData();
      form.append("image", editFile, editFile.name);
      if (maskFile) form.append("mask", maskFile, maskFile.name);
      else if (painted) form.append("mask", await paintedMask(), "mask.png");
      form.append("prompt", prompt);
      form.append("model", edit.elements.model.value);
      form.append("size", edit.elements.size.value);
      form.append("quality", edit.elements.quality.value);
      form.append("response_format", "b64_json");
      const answer = await callApi("/v1/images/edits", { method: "POST", body: form });
      await editResult.image(answer, started);
    } catch (err) {
      editResult.error(err.message);
      window.atelier.refreshBalance();
    } finally {
      editResult.busy(false);
      keepFocus(button);
    }
  });

  // ---- chat ----
  const chat = document.getElementById("chat-form");
  const log = chat.querySelector("[data-chat-log]");
  const chatError = chat.querySelector("[data-form-error]");
  let messages = [];
  function addMessage(role, content) {
    const li = document.createElement("li");
    li.className = role;
    li.textContent = content; // text, never markup
    li.setAttribute("aria-label", role === "user" ? "You" : "Assistant");
    log.append(li);
  }
  chat.elements.message.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); chat.requestSubmit(); }
  });
  chat.querySelector("[data-chat-reset]").addEventListener("click", () => { messages = []; log.replaceChildren(); showError(chatError, ""); });
  chat.addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = chat.elements.message.value.trim();
    if (!text) { showError(chatError, "Write a message first."); return; }
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
