from abtui.cli.entry import entry

entry()
