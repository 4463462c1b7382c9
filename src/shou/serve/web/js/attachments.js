// Files attached to the next task: each is uploaded into the workspace's top folder as soon as it is picked
// (PUT /v1/files/content, refused where write_file would refuse it), shown as a chip, and named at the end of
// the task so the model knows to read it.

import { $, el, button, bytes } from './util.js';
import { putFile, AuthError } from './api.js';

let attached = [];  // workspace paths

function draw() {
  const box = $('#attachments');
  box.replaceChildren();
  box.hidden = !attached.length;
  for (const a of attached) {
    const chip = el('span', 'chip');
    chip.append(el('span', '', `${a.path} (${bytes(a.size)})`),
                button('×', 'chip-x', () => { attached = attached.filter(x => x !== a); draw(); }, `Remove ${a.path}`));
    box.append(chip);
  }
}

/** The line the task gets for the attached files ('' when none). */
export function mention() {
  return attached.length ? `\n\nAttached files (in the workspace): ${attached.map(a => a.path).join(', ')}` : '';
}

export function clear() { attached = []; draw(); }

/** Wire the composer's Attach button; `report(text, bad)` says how an upload went; `uploaded()` after each. */
export function setupAttachments(report, uploaded) {
  const input = $('#attach-input');
  $('#attach').addEventListener('click', () => input.click());
  input.addEventListener('change', async () => {
    for (const file of [...input.files]) {
      try {
        const r = await putFile(file.name, file);
        attached.push({ path: r.path, size: r.size });
        draw();
        uploaded(r.path);
      } catch (e) {
        if (!(e instanceof AuthError)) report(`Could not upload ${file.name}: ${e.message}`, true);
      }
    }
    input.value = '';
  });
  draw();
}
