import { EventEmitter } from "events";

export interface Task {
  id: number;
  name: string;
  priority: number;
}

export class TaskQueue extends EventEmitter {
  private tasks: Task[] = [];

  push(task: Task): void {
    this.tasks.push(task);
    this.tasks.sort((a, b) => b.priority - a.priority);
    this.emit("push", task);
  }

  pop(): Task | undefined {
    const task = this.tasks.shift();
    return task;
  }

  size(): number {
    
  }

  find(name: string): Task | undefined {
    for (const task of this.tasks) {
      if (task.name === name) {
        return task;
      }
    }
    return undefined;
  }
}

const queue = new TaskQueue();
queue.push({ id: 1, name: "build", priority: 2 });
console.log(queue.size());
