// A "More" button and the menu it opens, after the WAI-ARIA menu button pattern: Enter, Space or
// Down open it on the first item, Up on the last; arrows, Home and End move; Escape closes it and
// gives focus back to the button; Tab, a click elsewhere or choosing an item close it.

export interface MenuItem {
  label: string;
  className: string;
  title?: string;
  danger?: boolean;
  run: () => void;
}

// At most one menu is open at a time.
let openMenu: { wrap: HTMLElement; button: HTMLButtonElement; list: HTMLElement } | null = null;
let menuCount = 0;

function items(list: HTMLElement): HTMLButtonElement[] {
  return [...list.querySelectorAll<HTMLButtonElement>('[role=menuitem]')];
}

export function closeMenu(focusButton = false): void {
  if (!openMenu) return;
  const { button, list } = openMenu;
  openMenu = null;
  list.hidden = true;
  button.setAttribute('aria-expanded', 'false');
  if (focusButton && button.isConnected) button.focus();
}

function open(wrap: HTMLElement, button: HTMLButtonElement, list: HTMLElement,
              at: 'first' | 'last'): void {
  if (openMenu?.list !== list) closeMenu();
  openMenu = { wrap, button, list };
  list.hidden = false;
  button.setAttribute('aria-expanded', 'true');
  // Opens towards the side with room, so that it never reaches past the window's edge.
  list.classList.remove('align-left');
  const b = button.getBoundingClientRect();
  if (b.right - list.offsetWidth < 8) list.classList.add('align-left');
  const all = items(list);
  all[at === 'first' ? 0 : all.length - 1]?.focus();
}

export function menuButton(label: string, ariaLabel: string, entries: MenuItem[]): HTMLElement {
  const wrap = document.createElement('div');
  wrap.className = 'menu';
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'menu-button';
  button.textContent = label;
  button.title = ariaLabel;
  button.setAttribute('aria-label', ariaLabel);
  button.setAttribute('aria-haspopup', 'menu');
  button.setAttribute('aria-expanded', 'false');
  const list = document.createElement('div');
  list.className = 'menu-list';
  list.id = `menu-${++menuCount}`;
  list.setAttribute('role', 'menu');
  list.setAttribute('aria-label', ariaLabel);
  list.hidden = true;
  button.setAttribute('aria-controls', list.id);
  for (const e of entries) {
    const item = document.createElement('button');
    item.type = 'button';
    item.setAttribute('role', 'menuitem');
    item.tabIndex = -1;
    item.className = e.className + (e.danger ? ' danger' : '');
    item.textContent = e.label;
    if (e.title) item.title = e.title;
    item.addEventListener('click', () => {
      closeMenu(true);
      e.run();
    });
    list.append(item);
  }

  button.addEventListener('click', () => {
    if (openMenu?.list === list) closeMenu();
    else open(wrap, button, list, 'first');
  });
  button.addEventListener('keydown', (ev) => {
    if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
      ev.preventDefault();
      open(wrap, button, list, ev.key === 'ArrowDown' ? 'first' : 'last');
    }
  });
  list.addEventListener('keydown', (ev) => {
    const all = items(list);
    const i = all.indexOf(document.activeElement as HTMLButtonElement);
    let next = -1;
    if (ev.key === 'ArrowDown') next = (i + 1) % all.length;
    else if (ev.key === 'ArrowUp') next = (i - 1 + all.length) % all.length;
    else if (ev.key === 'Home') next = 0;
    else if (ev.key === 'End') next = all.length - 1;
    else if (ev.key === 'Escape') {
      ev.preventDefault();
      closeMenu(true);
      return;
    } else if (ev.key === 'Tab') {
      closeMenu();
      return;
    }
    if (next >= 0) {
      ev.preventDefault();
      all[next].focus();
    }
  });
  wrap.append(button, list);
  return wrap;
}

document.addEventListener('pointerdown', (ev) => {
  if (openMenu && !openMenu.wrap.contains(ev.target as Node)) closeMenu();
});
