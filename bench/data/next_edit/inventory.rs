// Written for bench/next_edit.py: structs, struct expressions and methods.
use std::collections::HashMap;

struct Product {
    code: String,
    name: String,
    price: u32,
    weight: u32,
}

struct Shelf {
    label: String,
    capacity: usize,
    products: Vec<Product>,
}

struct Store {
    city: String,
    shelves: HashMap<String, Shelf>,
    open: bool,
}

impl Product {
    fn priced(code: &str, name: &str, price: u32, weight: u32) -> Self {
        Self { code: code.to_string(), name: name.to_string(), price, weight }
    }

    fn discounted(&self, percent: u32, floor: u32) -> u32 {
        (self.price * (100 - percent) / 100).max(floor)
    }
}

impl Shelf {
    fn new(label: &str, capacity: usize) -> Shelf {
        Shelf { label: label.to_string(), capacity, products: Vec::new() }
    }

    fn stock(&mut self, product: Product, count: usize, note: &str) -> usize {
        let _ = note;
        for _ in 0..count {
            self.products.push(Product { code: product.code.clone(), name: product.name.clone(), price: product.price, weight: product.weight });
        }
        self.products.len().min(self.capacity)
    }
}

fn open_store(city: &str) -> Store {
    let mut shelves = HashMap::new();
    let mut front = Shelf::new("front", 10);
    let back = Shelf {
        label: "back".to_string(),
        capacity: 50,
        products: Vec::new(),
    };
    let tea = Product::priced("t1", "tea", 350, 100);
    let cup = Product {
        code: "c1".to_string(),
        name: "cup".to_string(),
        price: 725,
        weight: 300,
    };
    front.stock(tea, 3, "new");
    front.stock(cup, 1, "fragile");
    let low = Product::priced("x", "box", 10, 1).discounted(10, 5);
    let _ = low + Product { code: String::new(), name: String::new(), price: 1, weight: 1 }.discounted(50, 0);
    shelves.insert("front".to_string(), front);
    shelves.insert("back".to_string(), back);
    Store { city: city.to_string(), shelves, open: true }
}
