// Light/dark: follows prefers-color-scheme until the person picks one with the toggle.
// theme-init.js applies the saved choice before first paint; this module keeps the toggle in step.

const KEY = "chapterverse.theme";
const DARK = window.matchMedia("(prefers-color-scheme: dark)");

function effective() {
  const chosen = document.documentElement.dataset.theme;
  if (chosen === "light" || chosen === "dark") return chosen;
  return DARK.matches ? "dark" : "light";
}

function label(button) {
  const next = effective() === "dark" ? "light" : "dark";
  button.textContent = next === "dark" ? "Dark" : "Light";
  button.setAttribute("aria-label", `Switch to ${next} theme`);
  button.setAttribute("aria-pressed", String(effective() === "dark"));
}

export function setupTheme(button) {
  if (!button) return;
  label(button);
  button.addEventListener("click", () => {
    const next = effective() === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    try {
      localStorage.setItem(KEY, next);
    } catch (_) {
      /* storage disabled: the choice lasts for this page */
    }
    label(button);
  });
  DARK.addEventListener("change", () => label(button));
}
