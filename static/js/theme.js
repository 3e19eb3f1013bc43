// Light or dark: the system's choice unless this browser was told otherwise with the toggle (remembered here).
// Loaded in <head>, before the page paints, so a chosen theme never flashes the other one first.
(function () {
  const KEY = "vouch.theme";
  const root = document.documentElement;
  const system = window.matchMedia("(prefers-color-scheme: dark)");

  function stored() {
    try {
      return localStorage.getItem(KEY);
    } catch (error) {
      return null; // storage refused (a private window's policy): follow the system
    }
  }

  function effective() {
    const chosen = stored();
    return chosen === "dark" || chosen === "light" ? chosen : system.matches ? "dark" : "light";
  }

  function apply() {
    const chosen = stored();
    if (chosen === "dark" || chosen === "light") {
      root.dataset.theme = chosen;
    } else {
      delete root.dataset.theme;
    }
    const button = document.getElementById("theme-toggle");
    if (button) {
      const dark = effective() === "dark";
      button.setAttribute("aria-pressed", String(dark));
      button.textContent = dark ? "Light mode" : "Dark mode";
      button.hidden = false;
    }
  }

  apply();
  system.addEventListener("change", apply);
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("theme-toggle");
    if (!button) {
      return;
    }
    button.addEventListener("click", () => {
      const next = effective() === "dark" ? "light" : "dark";
      try {
        // Back to following the system when the choice is what the system says anyway.
        if (next === (system.matches ? "dark" : "light")) {
          localStorage.removeItem(KEY);
        } else {
          localStorage.setItem(KEY, next);
        }
      } catch (error) {
        return; // nowhere to remember it
      }
      apply();
    });
    apply();
  });
})();
