"use strict";
// Derived values: the effective CPU topology, and each interface's name.
(function () {
  const form = document.getElementById("instance-form");
  function value(name) { const el = form.elements[name]; return el && el.value ? parseInt(el.value, 10) : null; }
  function update() {
    const vcpus = value("vcpus"), s = value("sockets"), c = value("cores"), t = value("threads");
    const preview = document.getElementById("topology-preview");
    if (s && c && t) {
      const product = s * c * t;
      preview.textContent = `${s} socket(s) × ${c} core(s) × ${t} thread(s) = ${product} vCPU` + (product === vcpus ? "" : ` (needs ${vcpus})`);
      preview.classList.toggle("error", product !== vcpus);
    } else {
      preview.textContent = `${vcpus} socket(s) × 1 core × 1 thread = ${vcpus} vCPU`;
      preview.classList.remove("error");
    }
    form.querySelectorAll("#nics-rows .form-row").forEach((row, i) => {
      row.querySelector(".row-title").textContent = `eth${i}` + (i === 0 ? " ★ primary" : "");
    });
  }
  form.addEventListener("input", update);
  document.body.addEventListener("htmx:afterSwap", update);
  update();
})();
