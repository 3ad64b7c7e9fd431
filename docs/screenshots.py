"""Take the README's two screenshots (docs/img/chat.png, docs/img/engine.png) with smol-135m.

    python docs/screenshots.py            # needs chromium + chromium-driver (`make browser`)

Serves the real model on loopback, asks the chat page one question, then sends a handful
of chats that share one long system prompt and photographs the engine view while they
run (shared blocks, a queue, the radix tree, the plot). Never run by the tests.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests                                                     # noqa: E402
from selenium import webdriver                                      # noqa: E402
from selenium.webdriver.chrome.service import Service               # noqa: E402
from selenium.webdriver.common.by import By                         # noqa: E402
from selenium.webdriver.common.keys import Keys                     # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait             # noqa: E402

from engine.api import EngineConfig                                 # noqa: E402
from server.config import ServeConfig                               # noqa: E402
from server.serve import spawn                                      # noqa: E402
from tests.browser.conftest import CHROMIUM_FLAGS                   # noqa: E402

POST_TIMEOUT_S = 600                  # a busy machine is slow; a screenshot run waits


def post(handle, path: str, body: dict) -> None:
    requests.post(handle.http_url + path, json=body, timeout=POST_TIMEOUT_S)


OUT_DIR = ROOT / "docs" / "img"
MODEL_DIR = ROOT / "artifacts" / "models" / "smol-135m"
WINDOW = "--window-size=1100,720"
SYSTEM = ("You are a patient teacher at a lighthouse museum. Answer in two short sentences, "
          "plainly, for a visitor who has never seen a lighthouse lamp up close. ") * 4
QUESTIONS = ["Why is the lamp so bright?", "Who kept the light?", "How far can ships see it?",
             "Why does it turn?", "What fuel did it burn?", "Is it still used?",
             "What is a fresnel lens?", "How tall is it?", "Why is it striped?",
             "What did the keeper eat?"]


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in CHROMIUM_FLAGS + (WINDOW, f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def chat_shot(driver, handle) -> None:
    driver.get(handle.http_url + "/")
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "model").text)
    driver.find_element(By.ID, "system").send_keys("You are a friendly assistant.")
    driver.find_element(By.ID, "seed").send_keys("3")
    driver.find_element(By.ID, "max-tokens").clear()
    driver.find_element(By.ID, "max-tokens").send_keys("60")
    driver.find_element(By.ID, "input").send_keys("What is a lighthouse for?", Keys.ENTER)
    WebDriverWait(driver, 300).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg[data-done]"))
    driver.save_screenshot(str(OUT_DIR / "chat.png"))


def engine_shot(driver, handle) -> None:
    driver.get(handle.health_url + "/engine")
    bodies = [{"model": "smol-135m", "max_tokens": 48, "temperature": 0.7, "seed": i,
               "messages": [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": q}]} for i, q in enumerate(QUESTIONS)]
    post(handle, "/v1/chat/completions", dict(bodies[0], max_tokens=4))  # the prompt, cached
    workers = [threading.Thread(target=post, args=(handle, "/v1/chat/completions", b))
               for b in bodies]
    for w in workers:
        w.start()
        time.sleep(0.3)
    time.sleep(3.0)
    driver.save_screenshot(str(OUT_DIR / "engine.png"))
    for w in workers:
        w.join()


def main() -> int:
    OUT_DIR.mkdir(exist_ok=True)
    engine = EngineConfig(num_kv_blocks=192, max_num_seqs=6)      # a small pool: a visible grid
    handle = spawn(ServeConfig.for_model(MODEL_DIR, engine=engine))
    driver = browser()
    try:
        chat_shot(driver, handle)
        engine_shot(driver, handle)
    finally:
        driver.quit()
        handle.stop()
    print("wrote", *sorted(p.name for p in OUT_DIR.glob("*.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
