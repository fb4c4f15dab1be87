# What a command-line tool under tools/ shares, included at the end of its
# Makefile: libddpenv built first, and the install of its program as
# $(PREFIX)/bin/$(TOOL) with its man page man/$(TOOL).1.
$(LIBDDPENV): FORCE
	$(MAKE) -C ../../libddpenv

FORCE:

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MANDIR)/man1
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/$(TOOL)
	install -m 644 ../../man/$(TOOL).1 $(DESTDIR)$(MANDIR)/man1/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/$(TOOL) $(DESTDIR)$(MANDIR)/man1/$(TOOL).1

.PHONY: all install uninstall FORCE
