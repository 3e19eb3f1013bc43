// Copy buttons: progressive enhancement. Without JavaScript the button stays hidden and the
// value sits in a readonly input, ready to select and copy by hand.
"use strict";

function copyFallback(input) {
  input.focus();
  input.select();
  try {
    return document.execCommand("copy");
  } catch (error) {
    return false;
  }
}

function setUpCopyButton(button) {
  const input = document.getElementById(button.dataset.copyTarget);
  const status = document.getElementById("copy-status");
  if (!input) {
    return;
  }
  button.hidden = false;
  button.addEventListener("click", async () => {
    let copied = false;
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(input.value);
        copied = true;
      } catch (error) {
        copied = copyFallback(input);
      }
    } else {
      copied = copyFallback(input);
    }
    button.textContent = copied ? "Copied" : "Copy";
    if (status) {
      status.textContent = copied ? "Copied to the clipboard." : "Select the key and copy it by hand.";
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("button[data-copy-target]").forEach(setUpCopyButton);
  // A click in the key selects all of it, so a manual copy never misses a character.
  document.querySelectorAll("input[readonly]").forEach((input) => {
    input.addEventListener("focus", () => input.select());
  });
});
