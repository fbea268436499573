// A document's `form` section as HTML: `<form data-nube-form="<name>">`, which the site nube publishes
// declares and serves with nube's action (websites/site-forms.ts), so visitors' submissions reach the
// forms area. Built here from typed fields, every text escaped: no author HTML reaches the page (the
// sanitizer, which drops forms, never sees it).
import { escapeHtml } from './sanitize.js';

export const FORM_FIELD_TYPES = ['text', 'email', 'textarea', 'number', 'checkbox', 'select'] as const;

export interface FormFieldSpec {
  name: string;
  label?: string;
  type?: (typeof FORM_FIELD_TYPES)[number];
  required?: boolean;
  options?: string[];
  placeholder?: string;
}

export interface FormSpec {
  name: string;
  fields: FormFieldSpec[];
  submitLabel?: string;
}

/** Added to the page's head when a section holds a form. */
export const FORM_CSS =
  '.nube-form{display:grid;gap:.8rem;max-width:32rem;margin:1rem 0}' +
  '.nube-form label{display:grid;gap:.25rem;font-weight:600}' +
  '.nube-form label.check{display:flex;gap:.5rem;align-items:center;font-weight:400}' +
  '.nube-form input,.nube-form textarea,.nube-form select{font:inherit;padding:.5rem;border:1px solid currentColor;border-radius:4px;background:transparent;color:inherit}' +
  '.nube-form button{font:inherit;padding:.6rem 1.2rem;border:0;border-radius:4px;background:var(--color-primary,#222);color:#fff;cursor:pointer;justify-self:start}' +
  '.nube-form .nube-hp{position:absolute;left:-10000px;width:1px;height:1px;overflow:hidden}';

function field(f: FormFieldSpec, formName: string): string {
  const id = escapeHtml(`${formName}-${f.name}`);
  const name = escapeHtml(f.name);
  const label = escapeHtml(f.label ?? f.name);
  const req = f.required ? ' required' : '';
  const ph = f.placeholder ? ` placeholder="${escapeHtml(f.placeholder)}"` : '';
  switch (f.type ?? 'text') {
    case 'textarea':
      return `<label for="${id}">${label}<textarea id="${id}" name="${name}" rows="5"${ph}${req}></textarea></label>`;
    case 'checkbox':
      return `<label class="check" for="${id}"><input type="checkbox" id="${id}" name="${name}" value="yes"${req}>${label}</label>`;
    case 'select': {
      const opts = (f.options ?? []).map((o) => `<option>${escapeHtml(o)}</option>`).join('');
      return `<label for="${id}">${label}<select id="${id}" name="${name}"${req}><option value="">—</option>${opts}</select></label>`;
    }
    default:
      return `<label for="${id}">${label}<input type="${f.type ?? 'text'}" id="${id}" name="${name}"${ph}${req}></label>`;
  }
}

/** The form as HTML (with its honeypot), for a section of kind `form`. */
export function formHtml(spec: FormSpec): string {
  const name = escapeHtml(spec.name);
  return (
    `<form class="nube-form" data-nube-form="${name}" method="post">` +
    spec.fields.map((f) => field(f, spec.name)).join('') +
    // People never see or fill it; bots that fill every field are answered as if it worked.
    '<div class="nube-hp" aria-hidden="true"><input type="text" name="_gotcha" tabindex="-1" autocomplete="off"></div>' +
    `<button type="submit">${escapeHtml(spec.submitLabel ?? 'Send')}</button></form>`
  );
}
