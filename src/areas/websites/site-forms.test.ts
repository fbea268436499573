import { describe, expect, it } from 'vitest';
import { formNamesIn, withFormActions } from './site-forms.js';

const served = (html: string) => withFormActions(Buffer.from(html)).toString('utf8');

describe('forms a site declares', () => {
  it('reads names in any quoting, once each, and skips invalid ones', () => {
    expect(
      formNamesIn(
        `<FORM DATA-NUBE-FORM="Contact"></FORM><form data-nube-form='news_1'><form data-nube-form=plain-2>` +
          `<form data-nube-form="contact"><form data-nube-form="Contact"><form data-nube-form="a b">` +
          `<form data-nube-form="../x"><form data-nube-form=""><div data-nube-form="div">` +
          `<form data-nube-form="${'x'.repeat(65)}">`,
      ),
    ).toEqual(['Contact', 'news_1', 'plain-2', 'contact']);
  });

  it("gives a declared form without an action nube's, and leaves every other form alone", () => {
    expect(served('<form data-nube-form="c"><input name=a></form>')).toBe(
      '<form data-nube-form="c" action="/f/c" method="post"><input name=a></form>',
    );
    expect(served('<form data-nube-form="c" method="POST"></form>')).toBe(
      '<form data-nube-form="c" method="POST" action="/f/c"></form>',
    );
    expect(served('<form data-nube-form="c"/>')).toBe(
      '<form data-nube-form="c" action="/f/c" method="post"/>',
    );
    expect(served('<form data-nube-form="c" action="/mine"></form>')).toBe(
      '<form data-nube-form="c" action="/mine"></form>',
    );
    expect(served('<form action="/x"></form><form data-nube-form="../x"></form>')).toBe(
      '<form action="/x"></form><form data-nube-form="../x"></form>',
    );
    // A file input in the form (and only in it) asks for multipart.
    expect(
      served('<form data-nube-form="a"><input type=file name=f></form><form data-nube-form="b"></form>'),
    ).toBe(
      '<form data-nube-form="a" action="/f/a" method="post" enctype="multipart/form-data"><input type=file name=f></form>' +
        '<form data-nube-form="b" action="/f/b" method="post"></form>',
    );
    const plain = Buffer.from('<p>no forms</p>');
    expect(withFormActions(plain)).toBe(plain);
  });
});
