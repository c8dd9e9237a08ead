// Written for bench/next_edit.py: classes, methods and their calls.
class Panel {
  constructor(title) {
    this.title = title;
    this.children = [];
  }

  attach(child, index, visible) {
    this.children.splice(index, 0, { child, visible });
    return this.children.length;
  }

  resize(width, height) {
    return { width: width * 2, height: height * 2 };
  }

  render() {
    this.attach("header", 0, true);
    const size = this.resize(320, 200);
    return `${this.title} ${size.width}x${size.height}`;
  }
}

class Toolbar {
  constructor(owner) {
    this.owner = owner;
  }

  placeButton(label, slot, tooltip) {
    return `${label}@${slot}:${tooltip}`;
  }

  layout() {
    return [this.placeButton("save", 1, "Save"), this.placeButton("open", 2, "Open")];
  }
}

function main() {
  const panel = new Panel("main");
  panel.attach("body", 1, true);
  panel.attach("footer", 2, false);
  const bar = new Toolbar(panel);
  bar.placeButton("quit", 9, "Quit");
  return [panel.render(), panel.resize(10, 20), bar.layout()];
}
