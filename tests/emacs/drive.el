;;; drive.el --- Emacs + eglot, no Rein plugin, drive a Rein task  -*- lexical-binding: t -*-

;; Run by tests/emacs/run in `emacs --batch -q' (site files loaded, as for a Debian user), in
;; a git repository the script made.  The configuration is the README's eglot block, read
;; from README.md and evaluated as written (REIN_EMACS_CONFIG names the extracted file).
;; The person is scripted at the one place batch Emacs cannot type: `completing-read', where
;; eglot asks which code action to run and shows `window/showMessageRequest'.  Everything
;; else is eglot's own code: M-x eglot, `eglot-code-actions', `eglot-execute-command',
;; flymake diagnostics, saving, auto-revert.
;;
;; Every wait is on a condition, with a generous guard against a hang (never an assertion on
;; time).  Each check prints "PASS name" or "FAIL name: why" and appends "P F" to
;; REIN_EMACS_RESULTS.

(require 'cl-lib)
(require 'subr-x)

(defvar rein-test-repo (getenv "REIN_EMACS_REPO"))
(defvar rein-test-gate (getenv "REIN_EMACS_GATE"))
(defvar rein-test-results (getenv "REIN_EMACS_RESULTS"))
(defvar rein-test-guard 60 "Seconds after which a wait counts as hung.")
(defvar rein-test-passed 0)
(defvar rein-test-failed 0)

(defun rein-test-say (fmt &rest args)
  (princ (concat (apply #'format fmt args) "\n")))

(defvar rein-test-server)

(defun rein-test-record (name ok why)
  (if ok
      (progn (cl-incf rein-test-passed) (rein-test-say "PASS %s" name))
    (cl-incf rein-test-failed)
    (rein-test-say "FAIL %s: %s" name why)
    (unless rein-test-broken
      ;; What the task looked like then, for whoever reads the failure.
      (ignore-errors
        (let ((s (plist-get (eglot-execute-command rein-test-server "rein.state" []) :state)))
          (rein-test-say "     state: %s, stop reason %S, decisions %S\n     steps: %S"
                         (plist-get s :status) (plist-get s :stopReason) (plist-get s :decisions)
                         (mapcar (lambda (st) (format "%s %s %s" (plist-get st :n) (plist-get st :action)
                                                      (plist-get st :status)))
                                 (plist-get s :steps)))))
      (rein-test-say "     prompts: %S" (mapcar (lambda (p) (truncate-string-to-width (car p) 70))
                                           rein-test-prompts)))))

(defvar rein-test-broken nil "The first check that failed: the later ones build on it.")

(defmacro rein-test-check (name &rest body)
  "Run BODY as the check NAME: it passes when BODY returns non-nil without an error.
After a failure the rest of the story cannot be told: later checks fail without running."
  (declare (indent 1))
  `(if rein-test-broken
       (rein-test-record ,name nil (format "not run: %s failed" rein-test-broken))
     (condition-case err
         (let ((v (progn ,@body)))
           (rein-test-record ,name v "the condition did not hold"))
       (error (rein-test-record ,name nil (error-message-string err))))
     (when (and (> rein-test-failed 0) (not rein-test-broken))
       (setq rein-test-broken ,name))))

(defun rein-test-is (what value)
  "VALUE, or an error saying WHAT was expected."
  (or value (error "expected %s" what)))

(defun rein-test-wait (what pred)
  "Wait until PRED is non-nil, letting process output and timers run; error if hung."
  (let ((deadline (+ (float-time) rein-test-guard)) v)
    (while (and (not (setq v (funcall pred))) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (or v (error "hung: still waiting for %s after %ss" what rein-test-guard))))

;;; The scripted person at the minibuffer.

(defvar rein-test-answers nil
  "Queue of (PROMPT-REGEXP . CHOICE-REGEXP): the next prompt matching PROMPT-REGEXP gets
the first candidate matching CHOICE-REGEXP.")
(defvar rein-test-prompts nil "Every prompt seen, with its candidates, newest first.")

(defun rein-test-completing-read (prompt collection &rest _)
  (let* ((cands (all-completions "" collection))
         (entry (cl-find-if (lambda (e) (string-match-p (car e) prompt)) rein-test-answers)))
    (push (cons prompt cands) rein-test-prompts)
    (unless entry
      (rein-test-say "     unexpected prompt: %s %S" prompt cands)
      (error "unexpected prompt: %s %S" prompt cands))
    (setq rein-test-answers (delq entry rein-test-answers))
    (or (cl-find-if (lambda (c) (string-match-p (cdr entry) c)) cands)
        (error "no choice matching %S in %S (prompt %s)" (cdr entry) cands prompt))))

(advice-add 'completing-read :override #'rein-test-completing-read)

(defun rein-test-expect-prompt (prompt-re choice-re)
  (setq rein-test-answers (append rein-test-answers (list (cons prompt-re choice-re)))))

(defun rein-test-prompt-seen (re)
  (cl-find-if (lambda (p) (string-match-p re (car p))) rein-test-prompts))

;;; Rein through eglot.

(defvar rein-test-server nil "The eglot connection to rein lsp.")

(defun rein-test-command (command &optional args)
  "Run COMMAND as a user would with M-: (eglot-execute-command …)."
  (eglot-execute-command rein-test-server command (or args [])))

(defun rein-test-state ()
  (plist-get (rein-test-command "rein.state") :state))

(defun rein-test-status ()
  (plist-get (rein-test-state) :status))

(defun rein-test-wait-status (status)
  (rein-test-wait (format "status %s" status)
                  (lambda () (equal (rein-test-status) status))))

(defun rein-test-code-action (title-re &optional beg end)
  "Ask eglot for the code actions at BEG..END (point) and pick the one matching TITLE-RE.
Returns the candidates eglot listed, in order."
  (rein-test-expect-prompt "Pick an action" title-re)
  ;; As after M-x (a key, not a mouse event): eglot then asks in the minibuffer.
  (let ((last-nonmenu-event ?\r))
    (eglot-code-actions (or beg (point)) end nil t))
  (cdr (rein-test-prompt-seen "Pick an action")))

(defun rein-test-diagnostics (buffer)
  "What flymake shows in BUFFER, as (CODE-AND-MESSAGE …) strings."
  (with-current-buffer buffer
    (mapcar #'flymake-diagnostic-text (flymake-diagnostics))))

(defun rein-test-diagnostic (buffer re)
  (cl-find-if (lambda (d) (string-match-p re d)) (rein-test-diagnostics buffer)))

(defun rein-test-task-file ()
  "The task's state file, as the engine wrote it."
  (let* ((id (string-trim (with-temp-buffer
                            (insert-file-contents (expand-file-name ".git/rein/current" rein-test-repo))
                            (buffer-string)))))
    (with-temp-buffer
      (insert-file-contents (expand-file-name (format ".git/rein/tasks/%s/state.json" id) rein-test-repo))
      (json-parse-buffer :object-type 'plist :array-type 'list))))

(defun rein-test-disk (file)
  (with-temp-buffer
    (insert-file-contents (expand-file-name file rein-test-repo))
    (buffer-string)))

;; The agent's first command, as the system lists it (its state is "T" while frozen).
(defun rein-test-gate-process ()
  (cl-loop for pid in (list-system-processes)
           for attrs = (process-attributes pid)
           when (and (equal (alist-get 'args attrs) "cat .rein/gate")
                     (equal (file-truename (format "/proc/%d/cwd" pid))
                            (file-truename rein-test-repo)))
           return attrs))

(defun rein-test-library-version (lib)
  "The Version: header of LIB's source."
  (with-temp-buffer
    (insert-file-contents (find-library-name lib))
    (and (re-search-forward "^;; Version: \\(.*\\)" nil t) (match-string 1))))

;;; The run.

(defun rein-test-main ()
  ;; One buffer is left out of auto-revert, to see the stale-buffer warning; it must say so
  ;; before the README's config turns global-auto-revert-mode on and adopts open buffers.
  (let ((notes (find-file-noselect (expand-file-name "NOTES.txt" rein-test-repo)))
        calc)
    (with-current-buffer notes (setq-local global-auto-revert-ignore-buffer t))
    (load (getenv "REIN_EMACS_CONFIG") nil t)
    (rein-test-say "eglot %s (%s), jsonrpc %s"
                   (rein-test-library-version "eglot") (locate-library "eglot")
                   (rein-test-library-version "jsonrpc"))
    (setq calc (find-file-noselect (expand-file-name "calc.py" rein-test-repo)))
    (set-buffer calc)

    (rein-test-check "M-x eglot connects calc.py (python-mode) to rein lsp"
      (call-interactively #'eglot)
      (setq rein-test-server (rein-test-wait "eglot's connection" #'eglot-current-server))
      (rein-test-wait "initialize" (lambda () (eglot--server-capable :executeCommandProvider)))
      (equal (plist-get (eglot--server-info rein-test-server) :name) "rein"))
    (rein-test-check "NOTES.txt (text-mode) is served by the same connection"
      (with-current-buffer notes
        (eglot--maybe-activate-editing-mode)
        (eq (eglot-current-server) rein-test-server)))
    (dolist (b (list calc notes))
      (with-current-buffer b (flymake-start)))

    ;; The first move is an allow-listed command that blocks on a FIFO the driver writes to
    ;; (an approved command would run to completion before a pause lands).
    (rein-test-check "the README's rein.start line (eglot-execute-command) starts the task"
      (let ((r (eval (car (read-from-string
                           (with-temp-buffer
                             (insert-file-contents (getenv "REIN_EMACS_START"))
                             (buffer-string))))
                     t)))
        (and (plist-get r :taskId)
             (equal (plist-get (plist-get r :state) :status) "running"))))
    (rein-test-check "the agent runs its first command"
      (rein-test-wait "the command's process" #'rein-test-gate-process))

    (rein-test-check "pause by code action (listed first) freezes the running command"
      (let ((cands (rein-test-code-action "pause the agent")))
        (rein-test-wait-status "paused")
        (rein-test-is (format "pause listed first in %S" cands)
                      (string-match-p "pause the agent" (car cands)))
        (rein-test-is (format "no steer-selection action in %S" cands)
                      (not (cl-find-if (lambda (c) (string-match-p "steer about" c)) cands)))
        ;; SIGSTOP lands asynchronously: wait for the process to show it.
        (rein-test-wait "the command frozen (state T)"
                        (lambda () (equal (alist-get 'state (rein-test-gate-process)) "T")))))
    (rein-test-check "resume by code action thaws it"
      (rein-test-code-action "resume the agent")
      (rein-test-wait-status "running")
      (rein-test-wait "the command thawed"
                      (lambda () (not (equal (alist-get 'state (rein-test-gate-process)) "T")))))
    ;; Let the command end (the write waits until `cat' has the FIFO open); the agent then
    ;; asks its question.
    (rein-test-check "the command ends once the FIFO is written"
      (zerop (call-process "timeout" nil nil nil "60" "sh" "-c" "printf go > \"$1\"" "sh" rein-test-gate)))

    (rein-test-check "the question shows as a `decision' diagnostic"
      (rein-test-wait-status "awaiting_decision")
      (rein-test-wait "the decision diagnostic"
                      (lambda () (rein-test-diagnostic calc "decision.*mean(\\[\\])"))))
    (rein-test-check "the question is answered by code action on the selected answer"
      (let* ((beg (with-current-buffer calc
                    (goto-char (point-min))
                    (search-forward "raise ValueError")
                    (match-beginning 0)))
             (end (+ beg (length "raise ValueError"))))
        (with-current-buffer calc
          (rein-test-code-action "answer the agent: \"raise ValueError\"" beg end))
        (rein-test-wait "the second question"
                        (lambda () (let ((s (rein-test-state)))
                                     (and (equal (plist-get s :status) "awaiting_decision")
                                          (string-match-p "NaN" (format "%s" (plist-get s :decisions)))))))
        (cl-some (lambda (st) (string-match-p "answered: raise ValueError" (plist-get st :action)))
                 (plist-get (rein-test-state) :steps))))
    (rein-test-check "the answered question's diagnostic is replaced by the new one"
      (rein-test-wait "the new decision diagnostic"
                      (lambda () (and (rein-test-diagnostic calc "NaN")
                                      (not (rein-test-diagnostic calc "mean(\\[\\])"))))))

    (rein-test-check "take over by code action while the agent waits on a question"
      (rein-test-code-action "take over from the agent")
      (rein-test-wait-status "human")
      (equal (plist-get (plist-get (rein-test-state) :control) :holder) "human"))

    (rein-test-check "the human's fix, typed and saved in Emacs, is on disk"
      (with-current-buffer calc
        (goto-char (point-min))
        (search-forward "    return sum(xs) / len(xs) + 1\n")
        (replace-match "    if not xs:\n        raise ValueError(\"mean of an empty list\")\n    return sum(xs) / len(xs)\n" t t)
        (save-buffer))
      (string-match-p "raise ValueError(\"mean of an empty list\")" (rein-test-disk "calc.py")))

    ;; The agent's test run after the hand back waits for approval: the person approves it
    ;; at eglot's prompt.
    (rein-test-expect-prompt "Server reports" "\\`approve\\'")
    (rein-test-check "hand back by eglot-execute-command reports the human's change"
      (let* ((r (eglot-execute-command rein-test-server "rein.handback" [(:note "fixed mean()")]))
             (changes (plist-get (plist-get r :reconcile) :changes)))
        (cl-some (lambda (c) (equal (plist-get c :path) "calc.py")) (append changes nil))))

    (rein-test-check "auto-revert shows the agent's median() in the open calc.py"
      (rein-test-wait "the reloaded buffer"
                      (lambda () (with-current-buffer calc
                                   (and (not (buffer-modified-p))
                                        (save-excursion (goto-char (point-min))
                                                        (search-forward "def median" nil t))))))
      (with-current-buffer calc
        (save-excursion (goto-char (point-min))
                        (search-forward "raise ValueError(\"mean of an empty list\")" nil t))))
    (rein-test-check "a buffer left unreverted gets the `stale' warning"
      (rein-test-wait "the stale diagnostic" (lambda () (rein-test-diagnostic notes "stale"))))
    (rein-test-check "reverting it clears the warning"
      (with-current-buffer notes (revert-buffer t t t))
      (rein-test-wait "no stale diagnostic" (lambda () (not (rein-test-diagnostic notes "stale")))))

    (rein-test-check "the test run's approval is prompted (window/showMessageRequest) and approved there"
      (rein-test-wait "the approval prompt" (lambda () (rein-test-prompt-seen "Server reports")))
      (string-match-p "python3 test_calc.py" (car (rein-test-prompt-seen "Server reports"))))
    (rein-test-check "the task finishes after the approved test run"
      (rein-test-wait-status "done"))
    (rein-test-check "the human's fix survives next to the agent's median() and the tests pass"
      (let ((disk (rein-test-disk "calc.py")))
        (and (string-match-p "raise ValueError(\"mean of an empty list\")" disk)
             (string-match-p "def median" disk)
             (not (string-match-p "+ 1" disk))
             (zerop (let ((default-directory (file-name-as-directory rein-test-repo)))
                      (call-process "python3" nil nil nil "test_calc.py"))))))
    (rein-test-check "state.json: done, the human's step, the answer, the skipped question, the passing run"
      (let* ((s (rein-test-task-file))
             (steps (plist-get s :steps))
             (action (lambda (re) (cl-find-if (lambda (st) (string-match-p re (plist-get st :action))) steps))))
        (and (equal (plist-get s :status) "done")
             (equal (plist-get (plist-get s :control) :holder) "none")
             (cl-some (lambda (st) (and (equal (plist-get st :author) "human") (> (plist-get st :n) 0)))
                      steps)
             (funcall action "answered: raise ValueError")
             (equal (plist-get (funcall action "NaN") :status) "skipped")
             (equal (plist-get (funcall action "python3 test_calc.py") :status) "done")
             (cl-some (lambda (c) (equal (plist-get c :path) "calc.py")) (plist-get s :humanChanges)))))
    (when-let ((dump (getenv "REIN_EMACS_EVENTS")) ((not (string-empty-p dump))))
      (with-current-buffer (jsonrpc-events-buffer rein-test-server)
        (write-region nil nil dump)))
    (ignore-errors (eglot-shutdown rein-test-server))))

(condition-case err
    (rein-test-main)
  (error (rein-test-record "the run" nil (error-message-string err))))
(with-temp-file rein-test-results
  (insert (format "%d %d\n" rein-test-passed rein-test-failed)))
(kill-emacs (if (zerop rein-test-failed) 0 1))
