/* The first process of a sandbox made from an imported template (an OCI image, a Dockerfile): it
 * waits for ever, as `/bin/sleep infinity` does in nube's own templates, in images without a sleep.
 * Static: it needs nothing from the image. */
#include <unistd.h>

int main(void) {
  for (;;) pause();
}
